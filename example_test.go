package shardid_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/shardid/shardid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

func Example() {
	g, err := shardid.NewGenerator(shardid.Instagram)
	if err != nil {
		log.Fatal(err)
	}
	userID := int64(31341)
	id, err := g.Next(int(userID % 2000)) // the shard comes from the sharding key
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("shard:", id.Shard()) // id.Time(), id.Shard() and id.Seq() read the Instagram layout
	fmt.Println("made just now:", time.Since(id.Time()) < time.Minute)
	fmt.Println("a decimal string:", id.String() == strconv.FormatInt(id.Int64(), 10))

	// An ID of another layout: decode it with that layout.
	p := shardid.Snowflake.Decompose(1050118621198921728)
	fmt.Println("datacenter", p.Shard, "worker", p.Worker, "seq", p.Seq)
	// Output:
	// shard: 1341
	// made just now: true
	// a decimal string: true
	// datacenter 10 worker 27 seq 0
}

func ExampleParse() {
	id, err := shardid.Parse("182432091342174089")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(id.Time().Format(time.RFC3339), id.Shard(), id.Seq())

	_, err = shardid.Parse("-1")
	fmt.Println(errors.Is(err, shardid.ErrRange), err)
	_, err = shardid.Parse("1e3")
	fmt.Println(errors.Is(err, shardid.ErrSyntax), err)
	// Output:
	// 2011-09-09T17:00:00Z 1341 905
	// true shardid: value out of range: parsing "-1"
	// true shardid: invalid syntax: parsing "1e3"
}

func ExampleID_MarshalJSON() {
	type Photo struct {
		ID      shardid.ID `json:"id"`
		Caption string     `json:"caption"`
	}
	b, _ := json.Marshal(Photo{ID: 182432091342174089, Caption: "sunset"})
	fmt.Println(string(b))

	// Clients may send the ID back as a string or as a number.
	var p Photo
	_ = json.Unmarshal([]byte(`{"id":182432091342174089}`), &p)
	fmt.Println(p.ID)
	// Output:
	// {"id":"182432091342174089","caption":"sunset"}
	// 182432091342174089
}

func ExampleNullID() {
	type Comment struct {
		ID       shardid.ID     `json:"id"`
		ParentID shardid.NullID `json:"parent_id"`
	}
	b, _ := json.Marshal([]Comment{
		{ID: 1, ParentID: shardid.NullIDOf(182432091342174089)},
		{ID: 2},
	})
	fmt.Println(string(b))
	// Output:
	// [{"id":"1","parent_id":"182432091342174089"},{"id":"2","parent_id":null}]
}

func ExampleLayout_Decompose() {
	// A real Tweet ID, from Twitter's API documentation.
	p := shardid.Snowflake.Decompose(1050118621198921728)
	fmt.Println(p.Time.Format(time.RFC3339Nano), "datacenter", p.Shard, "worker", p.Worker, "seq", p.Seq)
	// Output:
	// 2018-10-10T20:19:24.211Z datacenter 10 worker 27 seq 0
}

func ExampleLayout_Compose() {
	id, err := shardid.Instagram.Compose(shardid.Parts{
		Time:  time.Date(2011, 9, 9, 17, 0, 0, 0, time.UTC),
		Shard: 31341 % 2000,
		Seq:   5001 % 1024,
	})
	fmt.Println(id, err)
	// Output:
	// 182432091342174089 <nil>
}

func ExampleLayout_WithWorkerBits() {
	// Eight processes writing to the same shards: 3 worker bits, 128 IDs
	// per shard per millisecond for each.
	l, err := shardid.Instagram.WithWorkerBits(3)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(l)
	fmt.Println("ends", l.End().Format("2006-01-02"))

	g, err := shardid.NewGenerator(l, shardid.WithWorker(5))
	if err != nil {
		log.Fatal(err)
	}
	id, _ := g.Next(1341)
	p := l.Decompose(id) // decode with the layout that made the ID
	fmt.Println("worker", p.Worker, "shard", p.Shard)

	// id.Seq() reads Instagram's 10 sequence bits, here the worker's 3 bits
	// and the 7 of the sequence: 5<<7 = 640 more than the sequence.
	fmt.Println("id.Seq() - p.Seq =", id.Seq()-p.Seq)
	// Output:
	// instagram+w3(41 time | 13 shard | 3 worker | 7 seq, 1ms since 2011-01-01T00:00:00Z)
	// ends 2045-11-03
	// worker 5 shard 1341
	// id.Seq() - p.Seq = 640
}

func ExampleNewLayout() {
	l, err := shardid.NewLayout(shardid.LayoutConfig{
		Name:       "mine",
		Epoch:      time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC),
		TimeBits:   41,
		ShardBits:  10,
		WorkerBits: 4,
		SeqBits:    8,
	})
	fmt.Println(l, err)
	// Output:
	// mine(41 time | 10 shard | 4 worker | 8 seq, 1ms since 2024-01-01T00:00:00Z) <nil>
}

func ExampleGenerator_NextN() {
	g, err := shardid.NewGenerator(shardid.Instagram)
	if err != nil {
		log.Fatal(err)
	}
	ids := make([]shardid.ID, 5000) // one call for a whole batch of rows
	if err := g.NextN(42, ids); err != nil {
		log.Fatal(err)
	}
	fmt.Println(ids[0] < ids[4999], ids[4999].Shard())
	// Output:
	// true 42
}

func ExampleNewPlugin() {
	db, err := gorm.Open(sqlite.Open("file::memory:"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	plugin, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2000})
	if err != nil {
		log.Fatal(err)
	}
	if err := db.Use(plugin); err != nil {
		log.Fatal(err)
	}

	type Comment struct {
		ID      shardid.ID
		PhotoID shardid.ID `shardid:"key"` // colocated with its photo
		Body    string
	}
	type Photo struct {
		ID       shardid.ID
		UserID   int64 `shardid:"key"` // shard = UserID % 2000
		Caption  string
		Comments []Comment
	}
	if err := db.AutoMigrate(&Photo{}, &Comment{}); err != nil {
		log.Fatal(err)
	}

	photo := Photo{UserID: 31341, Caption: "sunset", Comments: []Comment{{Body: "wow"}}}
	if err := db.Create(&photo).Error; err != nil {
		log.Fatal(err)
	}
	fmt.Println("photo on shard", photo.ID.Shard())
	fmt.Println("comment on shard", photo.Comments[0].ID.Shard())

	var back Photo
	db.Preload("Comments").First(&back, photo.ID)
	fmt.Println(back.ID == photo.ID, back.Comments[0].Body)
	// Output:
	// photo on shard 1341
	// comment on shard 1341
	// true wow
}

func ExampleNewRouter() {
	open := func() *gorm.DB {
		db, err := gorm.Open(sqlite.Open("file::memory:"), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			log.Fatal(err)
		}
		return db
	}
	plugin, _ := shardid.NewPlugin(shardid.PluginConfig{})
	router, err := shardid.NewRouter(shardid.RouterConfig{
		Databases: []*gorm.DB{open(), open()},
		Names:     []string{"east", "west"}, // shards 0-999 and 1000-1999
		Plugin:    plugin,
	})
	if err != nil {
		log.Fatal(err)
	}
	type Photo struct {
		ID     shardid.ID
		UserID int64 `shardid:"key"`
	}
	if err := router.Migrate(context.Background(), &Photo{}); err != nil {
		log.Fatal(err)
	}
	photo := Photo{UserID: 31341}
	if err := router.ForKey(photo.UserID).Create(&photo).Error; err != nil {
		log.Fatal(err)
	}
	var back Photo
	err = router.Get(context.Background(), &back, photo.ID) // the ID alone finds the database
	fmt.Println(router.DatabaseName(photo.ID.Shard()), back.UserID, err)
	// Output:
	// west 31341 <nil>
}

func ExampleAcquireLease() {
	// A state file guards one worker id across restarts; SQLLeaseStore and
	// redislease.Store share worker ids between processes.
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	layout, _ := shardid.Instagram.WithWorkerBits(3)
	lease, err := shardid.AcquireLease(context.Background(), shardid.LeaseConfig{
		Store:  &shardid.FileLeaseStore{Path: filepath.Join(dir, "worker-5")},
		Layout: layout,
		Prefer: 5,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Close(context.Background())
	id, err := lease.Generator().Next(1341)
	// The first claim of the file's worker id has fencing token 1.
	fmt.Println(lease.Worker(), lease.Token(), layout.Decompose(id).Worker, err)
	// Output:
	// 5 1 5 <nil>
}

func ExampleNewUUIDShortGenerator() {
	// A MariaDB server with server_id 200, started at this second, that has
	// given 41 values: the next is its 42nd.
	g, _ := shardid.NewUUIDShortGenerator(200, time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC), 41)
	v := g.Next()
	p := v.Decompose()
	fmt.Println(v, p.ServerID, p.Start.Format(time.RFC3339), p.Counter)
	// Output:
	// 14440291385552666665 200 2024-05-06T07:08:09Z 41
}

func ExampleComposePinterest() {
	id, _ := shardid.ComposePinterest(7, 2, 123456)
	fmt.Println(id, id.Shard(), id.Type(), id.Local())
	// Output:
	// 492718648320576 7 2 123456
}

func ExampleComposeFlake() {
	f, _ := shardid.ComposeFlake(1714979289123, 0x0123456789AB, 0x0102)
	fmt.Println(f, f.Time().Format(time.RFC3339Nano))
	// Output:
	// 0000018f-4cbb-3823-0123-456789ab0102 2024-05-06T07:08:09.123Z
}

func ExamplePostgresNextID() {
	sql, err := shardid.PostgresNextID(shardid.Instagram, "shard_0005", 5, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.SplitN(sql, "\n", 3)[1])
	// Output:
	// CREATE OR REPLACE FUNCTION "shard_0005".next_id() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
}
