package shardid_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// pageAll reads every page of the photos with likes <> 5, size per page,
// calling between(page) after each page, and returns the IDs in the order
// read and the number of pages.
func pageAll(t *testing.T, r *shardid.Router, desc bool, size int, between func(page int)) []shardid.ID {
	t.Helper()
	ctx := context.Background()
	var got []shardid.ID
	opts := shardid.PageOptions{Size: size, Desc: desc}
	for page := 0; ; page++ {
		p, err := shardid.GatherPage(ctx, r, opts, photoID,
			func(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
				var ps []FPhoto
				return ps, db.Where("likes <> ?", 5).Find(&ps).Error
			})
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		if len(p.Rows) > size {
			t.Fatalf("page %d has %d rows, want at most %d", page, len(p.Rows), size)
		}
		for _, row := range p.Rows {
			if row.Likes == 5 {
				t.Fatalf("page %d has %+v, which the filter excludes", page, row)
			}
			got = append(got, row.ID)
		}
		if p.Next == "" {
			return got
		}
		if len(p.Rows) != size {
			t.Fatalf("page %d has %d rows and a next page", page, len(p.Rows))
		}
		opts.Token = p.Next
		if between != nil {
			between(page)
		}
	}
}

// checkPages checks that got, read in pages, is strictly in ID order, has
// no row twice, and has every row of before that the filter keeps.
func checkPages(t *testing.T, got []shardid.ID, desc bool, before []FPhoto) {
	t.Helper()
	for i := 1; i < len(got); i++ {
		if desc && got[i] >= got[i-1] || !desc && got[i] <= got[i-1] {
			t.Fatalf("row %d: %v after %v: not in order, or shown twice", i, got[i], got[i-1])
		}
	}
	seen := make(map[shardid.ID]bool, len(got))
	for _, id := range got {
		seen[id] = true
	}
	missing := 0
	for _, p := range before {
		if p.Likes != 5 && !seen[p.ID] {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d rows that existed before the first page were never shown", missing)
	}
}

// Pages across shards, newest first and oldest first, while other
// goroutines insert rows into every shard: no row twice, none skipped.
func TestGatherPageConcurrentInserts(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			dbs := fanDBs(t, kind)
			r := fanRouter(t, dbs, "fo_p_%04d", 16)
			before := seed(t, r, 12)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var inserted sync.Map
			for w := range 3 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 1))
					for range 300 {
						select {
						case <-stop:
							return
						default:
						}
						p := FPhoto{UserID: rng.Int64N(1 << 20), Likes: rng.Int64N(11)}
						if err := r.ForKey(p.UserID).Create(&p).Error; err != nil {
							t.Error(err)
							return
						}
						inserted.Store(p.ID, true)
						time.Sleep(time.Millisecond)
					}
				})
			}
			for _, desc := range []bool{true, false} {
				got := pageAll(t, r, desc, 7, func(int) { time.Sleep(5 * time.Millisecond) })
				checkPages(t, got, desc, before)
				news := 0
				for _, id := range got {
					if _, ok := inserted.Load(id); ok {
						news++
					}
				}
				t.Logf("desc=%v: %d rows in %d pages, %d of them inserted while paging", desc, len(got), (len(got)+6)/7, news)
			}
			close(stop)
			wg.Wait()
		})
	}
}

// A shard that moves to the other database between two pages: its rows
// after the cursor are read from its new home, each once.
func TestGatherPageShardMoves(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			dbs := fanDBs(t, kind)
			if kind == "mysql" {
				// A move needs two servers: MySQL's databases of one
				// server are one database to a move.
				m := startMariaDBInstance(t)
				own, err := gorm.Open(mysql.Open(m.DSN("test")), gormConfig())
				if err != nil {
					t.Fatal(err)
				}
				closeAtEnd(t, own)
				dbs[1] = own
			}
			r := fanRouter(t, dbs, "fo_m_%04d", 8)
			before := seed(t, r, 10)
			const moved = 2 // on database a
			if r.DatabaseName(moved) != "a" {
				t.Fatalf("shard %d is on %s", moved, r.DatabaseName(moved))
			}
			got := pageAll(t, r, true, 9, func(page int) {
				if page != 3 {
					return
				}
				if _, err := reshard.MoveShard(context.Background(), r, nil, moved, "b",
					reshard.MoveOptions{Models: []any{&FPhoto{}}}); err != nil {
					t.Fatal(err)
				}
			})
			if r.DatabaseName(moved) != "b" {
				t.Fatalf("shard %d is on %s after the move", moved, r.DatabaseName(moved))
			}
			checkPages(t, got, true, before)
			// The moved shard's rows are on both sides of the move.
			var early, late int
			for i, id := range got {
				if r.ShardOf(id) == moved {
					if i < 4*9 {
						early++
					} else {
						late++
					}
				}
			}
			if early == 0 || late == 0 {
				t.Errorf("the moved shard's rows: %d before the move, %d after; want some of each", early, late)
			}
		})
	}
}

// A token that was altered, or is used with other options, is refused; raw
// SQL, which ignores the page's keyset, is refused.
func TestGatherPageRefuses(t *testing.T) {
	dbs := fanDBs(t, "postgres")
	r := fanRouter(t, dbs, "fo_t_%04d", 4)
	seed(t, r, 5)
	ctx := context.Background()
	q := func(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
		var ps []FPhoto
		return ps, db.Find(&ps).Error
	}
	opts := shardid.PageOptions{Size: 3, Desc: true, Secret: []byte("k1")}
	p, err := shardid.GatherPage(ctx, r, opts, photoID, q)
	if err != nil || p.Next == "" {
		t.Fatalf("first page: %v, next %q", err, p.Next)
	}
	if _, err := shardid.GatherPage(ctx, r, shardid.PageOptions{Size: 3, Desc: true, Secret: []byte("k1"), Token: p.Next}, photoID, q); err != nil {
		t.Fatalf("the token as given: %v", err)
	}
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	// Every character of the token counts, the spare bits of the last one
	// too.
	for i := range len(p.Next) {
		for _, c := range []byte("AB_-z") {
			b := []byte(p.Next)
			if b[i] == c {
				continue
			}
			b[i] = c
			o := shardid.PageOptions{Size: 3, Desc: true, Secret: []byte("k1"), Token: string(b)}
			if _, err := shardid.GatherPage(ctx, r, o, photoID, q); !errors.Is(err, shardid.ErrPageToken) {
				t.Fatalf("token %q with %q at %d: %v, want ErrPageToken", p.Next, c, i, err)
			}
		}
	}
	// The last character's two spare bits alone.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, p.Next[len(p.Next)-1])
	spare := p.Next[:len(p.Next)-1] + string(alphabet[last^1])
	if _, err := shardid.GatherPage(ctx, r, shardid.PageOptions{Size: 3, Desc: true, Secret: []byte("k1"), Token: spare}, photoID, q); !errors.Is(err, shardid.ErrPageToken) {
		t.Errorf("token %q with a spare bit set (%q): %v, want ErrPageToken", p.Next, spare, err)
	}
	for name, o := range map[string]shardid.PageOptions{
		"altered first byte":  {Size: 3, Desc: true, Secret: []byte("k1"), Token: flip(p.Next, 0)},
		"altered cursor":      {Size: 3, Desc: true, Secret: []byte("k1"), Token: flip(p.Next, 8)},
		"altered mac":         {Size: 3, Desc: true, Secret: []byte("k1"), Token: flip(p.Next, len(p.Next)-1)},
		"truncated":           {Size: 3, Desc: true, Secret: []byte("k1"), Token: p.Next[:len(p.Next)-2]},
		"other secret":        {Size: 3, Desc: true, Secret: []byte("k2"), Token: p.Next},
		"no secret":           {Size: 3, Desc: true, Token: p.Next},
		"other direction":     {Size: 3, Secret: []byte("k1"), Token: p.Next},
		"other column":        {Size: 3, Desc: true, Secret: []byte("k1"), Token: p.Next, Column: "f_photos.id"},
		"not base64":          {Size: 3, Desc: true, Secret: []byte("k1"), Token: "!!!"},
		"altered, no secret":  {Size: 3, Desc: true, Token: flip(mustNext(t, r, shardid.PageOptions{Size: 3, Desc: true}, q), 5)},
		"asc token with desc": {Size: 3, Desc: true, Token: mustNext(t, r, shardid.PageOptions{Size: 3}, q)},
	} {
		if _, err := shardid.GatherPage(ctx, r, o, photoID, q); !errors.Is(err, shardid.ErrPageToken) {
			t.Errorf("%s: %v, want ErrPageToken", name, err)
		}
	}
	_, err = shardid.GatherPage(ctx, r, shardid.PageOptions{Size: 3}, photoID,
		func(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
			var ps []FPhoto
			return ps, db.Raw("SELECT * FROM {{schema}}.f_photos").Scan(&ps).Error
		})
	if !errors.Is(err, shardid.ErrPageQuery) {
		t.Errorf("raw SQL: %v, want ErrPageQuery", err)
	}
	if _, err := shardid.GatherPage(ctx, r, shardid.PageOptions{Size: shardid.MaxPageSize + 1}, photoID, q); !errors.Is(err, shardid.ErrInvalidConfig) {
		t.Errorf("a page too large: %v, want ErrInvalidConfig", err)
	}
}

func mustNext(t *testing.T, r *shardid.Router, opts shardid.PageOptions, q func(context.Context, *gorm.DB) ([]FPhoto, error)) string {
	t.Helper()
	p, err := shardid.GatherPage(context.Background(), r, opts, photoID, q)
	if err != nil || p.Next == "" {
		t.Fatalf("page: %v, next %q", err, p.Next)
	}
	return p.Next
}

// TestGatherPageRefusesItsOwnLimit: a query that sets its own Limit or
// Offset reads only a part of each shard's page, and the page, cut at its
// size across the shards, then skipped the rest silently (a page of 3 over
// 4 shards with Limit(1): every shard's second row was never shown). It is
// refused with ErrPageQuery, run as a union or shard by shard, on both
// dialects; the same query without it pages every row.
func TestGatherPageRefusesItsOwnLimit(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			r := fanRouter(t, fanDBs(t, kind), "fo_lim_%04d", 4)
			all := seed(t, r, 3)
			ctx := context.Background()
			with := func(f func(*gorm.DB) *gorm.DB) func(context.Context, *gorm.DB) ([]FPhoto, error) {
				return func(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
					var ps []FPhoto
					return ps, f(db).Find(&ps).Error
				}
			}
			for _, perShard := range []bool{false, true} {
				for name, f := range map[string]func(*gorm.DB) *gorm.DB{
					"Limit(1)":   func(db *gorm.DB) *gorm.DB { return db.Limit(1) },
					"Limit(100)": func(db *gorm.DB) *gorm.DB { return db.Limit(100) },
					"Limit(-1)":  func(db *gorm.DB) *gorm.DB { return db.Limit(-1) },
					"Offset(1)":  func(db *gorm.DB) *gorm.DB { return db.Offset(1) },
				} {
					_, err := shardid.GatherPage(ctx, r, shardid.PageOptions{Size: 3, PerShard: perShard}, photoID, with(f))
					if !errors.Is(err, shardid.ErrPageQuery) {
						t.Errorf("PerShard %v, %s: %v, want ErrPageQuery", perShard, name, err)
					}
				}
				// Filtered, not limited: every row, once.
				var got []shardid.ID
				opts := shardid.PageOptions{Size: 3, PerShard: perShard}
				for {
					p, err := shardid.GatherPage(ctx, r, opts, photoID, with(func(db *gorm.DB) *gorm.DB { return db.Where("likes >= ?", 0) }))
					if err != nil {
						t.Fatalf("PerShard %v: %v", perShard, err)
					}
					for _, row := range p.Rows {
						got = append(got, row.ID)
					}
					if p.Next == "" {
						break
					}
					opts.Token = p.Next
				}
				if len(got) != len(all) {
					t.Errorf("PerShard %v: %d rows paged, want %d", perShard, len(got), len(all))
				}
			}
		})
	}
}
