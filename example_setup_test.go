package shardid_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// Setting up and running are separate: the lease table is created once by a
// role that may create tables, and the application's role, with SELECT,
// INSERT and UPDATE on it, only takes leases. (Not run: it needs a server.)
func ExampleSQLLeaseStore_Setup() {
	ctx := context.Background()
	var admin, app *gorm.DB // gorm.Open(postgres.Open(...)) as each role

	// At deployment, as the owner:
	if err := (&shardid.SQLLeaseStore{DB: admin}).Setup(ctx); err != nil {
		log.Fatal(err)
	}

	// In the application:
	layout, _ := shardid.Instagram.WithWorkerBits(4)
	lease, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{
		Store: &shardid.SQLLeaseStore{DB: app}, Layout: layout, TTL: 10 * time.Second})
	if errors.Is(err, shardid.ErrSetupRequired) {
		log.Fatal("run SQLLeaseStore.Setup as the owner first: ", err)
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Close(ctx)
}
