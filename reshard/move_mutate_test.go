package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
)

// retryMoving runs op until it fails with something else than
// ErrShardMoving.
func retryMoving(op func() error) error {
	for {
		err := op()
		if !errors.Is(err, shardid.ErrShardMoving) {
			return err
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// helperMoveMutator is a process with its own router, following the
// catalog, that updates, deletes and inserts rows of shard 3 (the IDs in
// $SHARDID_IDS are its own: no other writer touches them) until its
// standard input closes, and then writes the last acknowledged state of
// every row it touched to $SHARDID_OUT: "id caption", or "id -" when it
// deleted it, and a last line "ops updates deletes inserts".
func helperMoveMutator(t *testing.T) {
	worker, _ := strconv.Atoi(os.Getenv("SHARDID_WORKER"))
	r := moveRouterB(t, movePlugin(t, worker))
	c := &reshard.Catalog{DB: r.Databases()[0], Table: "shardid_mv_catalog"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := reshard.Follow(ctx, r, c, 50*time.Millisecond, nil); err != nil {
		fmt.Println("error", err)
		return
	}
	b, _ := os.ReadFile(os.Getenv("SHARDID_IDS"))
	var ids []shardid.ID
	for _, f := range strings.Fields(string(b)) {
		ids = append(ids, shardid.MustParse(f))
	}
	stop := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stop) }()
	state := map[shardid.ID]string{}
	var updates, deletes, inserts int
	rng := rand.New(rand.NewPCG(uint64(worker), 11))
	for i := 0; ; i++ {
		select {
		case <-stop:
			var out []string
			for id, s := range state {
				out = append(out, id.String()+" "+s)
			}
			out = append(out, fmt.Sprintf("ops %d %d %d", updates, deletes, inserts))
			os.WriteFile(os.Getenv("SHARDID_OUT"), []byte(strings.Join(out, "\n")), 0o644)
			return
		default:
		}
		var err error
		switch id := ids[rng.IntN(len(ids))]; {
		case i%3 == 2:
			ph := RPhoto{UserID: 3, Caption: fmt.Sprint("new ", worker, " ", i)}
			err = retryMoving(func() error { return r.ForKey(3).Create(&ph).Error })
			state[ph.ID] = ph.Caption
			inserts++
		case state[id] == "-" || rng.IntN(4) > 0:
			// An update, or a deleted row inserted again with its ID.
			caption := fmt.Sprint("upd ", worker, " ", i)
			err = retryMoving(func() error {
				if state[id] == "-" {
					return r.ForID(id).Create(&RPhoto{ID: id, UserID: 3, Caption: caption}).Error
				}
				res := r.ForID(id).Model(&RPhoto{}).Where("id = ?", id).Update("caption", caption)
				if res.Error == nil && res.RowsAffected != 1 {
					return fmt.Errorf("updating %v: %d rows", id, res.RowsAffected)
				}
				return res.Error
			})
			state[id] = caption
			updates++
		default:
			err = retryMoving(func() error {
				res := r.ForID(id).Where("id = ?", id).Delete(&RPhoto{})
				if res.Error == nil && res.RowsAffected != 1 {
					return fmt.Errorf("deleting %v: %d rows", id, res.RowsAffected)
				}
				return res.Error
			})
			state[id] = "-"
			deletes++
		}
		if err != nil {
			fmt.Println("error", err)
			return
		}
	}
}

// Shard 3 moves while two processes with routers of their own update,
// delete, insert again and insert rows of it: the last acknowledged state
// of every row is what the target holds, and the target equals the old
// copy plus what was written after the flip.
func TestMoveCarriesUpdatesAndDeletes(t *testing.T) {
	ownDatabases(t)
	if testing.Short() {
		t.Skip("a move under load takes seconds")
	}
	r, c, _ := freshMoveSetup(t)
	ctx := context.Background()
	seeded := seedShard(t, r, 3, 3000)
	type proc struct {
		stdin io.Closer
		wait  func() error
		out   string
	}
	var procs []proc
	for w := range 2 {
		dir := t.TempDir()
		var mine []string
		for i, ph := range seeded {
			if i%2 == w {
				mine = append(mine, ph.ID.String())
			}
		}
		if err := os.WriteFile(dir+"/ids", []byte(strings.Join(mine, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := helperProcess(t, "movemutator", "SHARDID_OUT="+dir+"/out", "SHARDID_IDS="+dir+"/ids", "SHARDID_WORKER="+strconv.Itoa(w+1))
		in, _ := cmd.StdinPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, proc{in, cmd.Wait, dir + "/out"})
	}
	time.Sleep(700 * time.Millisecond)
	res, err := reshard.MoveShard(ctx, r, c, 3, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 500, FenceFor: 10 * time.Second})
	time.Sleep(500 * time.Millisecond)
	want := map[shardid.ID]string{}
	for _, ph := range seeded {
		want[ph.ID] = ph.Caption
	}
	for _, p := range procs {
		p.stdin.Close()
		p.wait()
		b, err := os.ReadFile(p.out)
		if err != nil {
			t.Fatalf("a writer process reported nothing: %v", err)
		}
		lines := strings.Split(string(b), "\n")
		var u, d, i int
		if _, err := fmt.Sscanf(lines[len(lines)-1], "ops %d %d %d", &u, &d, &i); err != nil || u == 0 || d == 0 || i == 0 {
			t.Errorf("a writer process did %q (%v): want updates, deletes and inserts", lines[len(lines)-1], err)
		}
		t.Logf("a process made %d updates, %d deletes, %d inserts", u, d, i)
		for _, l := range lines[:len(lines)-1] {
			id, s, _ := strings.Cut(l, " ")
			want[shardid.MustParse(id)] = s
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("moved %+v", res)
	var got []RPhoto
	if err := r.Databases()[1].Table("shardid_mv_0003.r_photos").Find(&got).Error; err != nil {
		t.Fatal(err)
	}
	have := map[shardid.ID]string{}
	for _, ph := range got {
		have[ph.ID] = ph.Caption
	}
	bad := 0
	for id, s := range want {
		g, ok := have[id]
		switch {
		case s == "-" && ok:
			bad++
			t.Errorf("row %v was deleted, the target has %q", id, g)
		case s != "-" && g != s:
			bad++
			t.Errorf("row %v: the target has %q (found %v), the last acknowledged write %q", id, g, ok, s)
		}
		if bad > 10 {
			t.FailNow()
		}
	}
	for id := range have {
		if _, ok := want[id]; !ok {
			t.Errorf("the target has row %v that nobody wrote", id)
		}
	}
	noCapture(t, r.Databases()[0], "shardid_mv_0003")
	var sealed []RPhoto
	r.Databases()[0].Table("shardid_mv_0003.r_photos").Find(&sealed)
	if len(sealed) == 0 {
		t.Error("the old copy is empty")
	}
}

// A move cancelled while its statements run returns an error that wraps
// context.Canceled, lifts its fence and drops its change log.
func TestMoveCanceledMidStatement(t *testing.T) {
	ownDatabases(t)
	for _, stage := range []string{"mid-copy", "copied", "fenced"} {
		t.Run(stage, func(t *testing.T) {
			r, c, _ := freshMoveSetup(t)
			seedShard(t, r, 1, 400)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			n := 0
			_, err := reshard.MoveShard(ctx, r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 50,
				Progress: func(string, int64) {
					if n++; stage == "mid-copy" && n == 3 {
						cancel()
					}
				},
				OnStage: func(s string) {
					if s == stage {
						cancel()
					}
				}})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled at %s: %v, want an error wrapping context.Canceled", stage, err)
			}
			if r.DatabaseName(1) != "pg1" {
				t.Fatal("a cancelled move flipped the map")
			}
			if err := r.ForKey(1).Create(&RPhoto{UserID: 1}).Error; err != nil {
				t.Errorf("the source after a cancelled move: %v", err)
			}
			noCapture(t, r.Databases()[0], "shardid_mv_0001")
		})
	}
}
