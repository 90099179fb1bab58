package shardid_test

import (
	"context"
	"fmt"
	"log"

	"github.com/glebarez/sqlite"
	"github.com/shardid/shardid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// exampleRouter returns a router over two in-memory SQLite databases and
// 12 photos of users 0 to 11 (likes: the user's number modulo 3).
func exampleFanoutRouter() *shardid.Router {
	open := func() *gorm.DB {
		db, err := gorm.Open(sqlite.Open("file::memory:"), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			log.Fatal(err)
		}
		sqlDB, _ := db.DB()
		sqlDB.SetMaxOpenConns(1) // one connection: one in-memory database
		return db
	}
	plugin, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 16})
	router, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{open(), open()}, LogicalShards: 16, Plugin: plugin})
	if err != nil {
		log.Fatal(err)
	}
	if err := router.Migrate(context.Background(), &ExPhoto{}); err != nil {
		log.Fatal(err)
	}
	for user := range int64(12) {
		if err := router.ForKey(user).Create(&ExPhoto{UserID: user, Likes: user % 3}).Error; err != nil {
			log.Fatal(err)
		}
	}
	return router
}

// ExPhoto is the model of the fan-out examples.
type ExPhoto struct {
	ID     shardid.ID
	UserID int64 `shardid:"key"`
	Likes  int64
}

func ExampleGatherPage() {
	router := exampleFanoutRouter()
	ctx := context.Background()
	opts := shardid.PageOptions{Size: 3, Desc: true}
	for {
		page, err := shardid.GatherPage(ctx, router, opts,
			func(p ExPhoto) shardid.ID { return p.ID },
			func(ctx context.Context, db *gorm.DB) ([]ExPhoto, error) {
				var ps []ExPhoto
				return ps, db.Where("likes > ?", 0).Find(&ps).Error // the page's keyset is on db
			})
		if err != nil {
			log.Fatal(err)
		}
		var users []int64
		for _, p := range page.Rows {
			users = append(users, p.UserID)
		}
		fmt.Println(users, page.Next != "")
		if page.Next == "" {
			break
		}
		opts.Token = page.Next // opaque, URL-safe; refused if altered
	}
	// Output:
	// [11 10 8] true
	// [7 5 4] true
	// [2 1] false
}

func ExampleAggregate() {
	router := exampleFanoutRouter()
	rows, err := shardid.Aggregate(context.Background(), router, shardid.AggregateOptions{
		GroupBy: []string{"likes"},
		Columns: []shardid.AggregateColumn{
			{Func: shardid.AggCount, Expr: "*"},
			{Func: shardid.AggSum, Expr: "user_id"},
			{Func: shardid.AggAvg, Expr: "user_id"},
		},
	}, func(ctx context.Context, db *gorm.DB) *gorm.DB { return db.Model(&ExPhoto{}) })
	if err != nil {
		log.Fatal(err)
	}
	for _, row := range rows {
		fmt.Println("likes", row.Group[0], "photos", row.Values[0], "sum", row.Values[1], "avg", row.Values[2])
	}
	// Unordered output:
	// likes 0 photos 4 sum 18/1 avg 9/2
	// likes 1 photos 4 sum 22/1 avg 11/2
	// likes 2 photos 4 sum 26/1 avg 13/2
}

func ExampleGatherCount() {
	router := exampleFanoutRouter()
	n, err := shardid.GatherCount(context.Background(), router, func(ctx context.Context, db *gorm.DB) *gorm.DB {
		return db.Model(&ExPhoto{}).Where("likes = ?", 2)
	})
	fmt.Println(n, err)
	// Output:
	// 4 <nil>
}
