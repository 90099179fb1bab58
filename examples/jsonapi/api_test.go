package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardid/shardid"
)

// POST /photos takes user_id as a string or a number, as shardid.ID does,
// and refuses anything else with 400; the response carries it as a string.
func TestUserIDStringOrNumber(t *testing.T) {
	db, plugin, err := openDB(filepath.Join(t.TempDir(), "api.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newHandler(db, plugin))
	defer srv.Close()
	for _, tc := range []struct {
		body   string
		status int
		want   string // user_id in the response
	}{
		{`{"user_id": 31341, "caption": "a number"}`, 201, "31341"},
		{`{"user_id": "31341", "caption": "a string"}`, 201, "31341"},
		{`{"user_id": 9007199254740993, "caption": "past 2^53"}`, 201, "9007199254740993"},
		{`{"user_id": 1.5}`, 400, ""},
		{`{"user_id": 1e3}`, 400, ""},
		{`{"user_id": "x"}`, 400, ""},
		{`{"user_id": "12\"3"}`, 400, ""},
		{`{"user_id": true}`, 400, ""},
		{`{"user_id": -5}`, 400, ""}, // a negative sharding key
	} {
		resp, err := http.Post(srv.URL+"/photos", "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("POST %s: %d %v, want %d", tc.body, resp.StatusCode, got, tc.status)
			continue
		}
		if tc.status == 201 && got["user_id"] != tc.want {
			t.Errorf("POST %s: user_id came back as %#v, want %q", tc.body, got["user_id"], tc.want)
		}
	}
}

// The server keeps its SQLite file in a temporary directory, and removes it
// when it stops on SIGINT.
func TestServeRemovesItsFile(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	done := make(chan error, 1)
	go func() { done <- serve("127.0.0.1:0", "") }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		files, _ := filepath.Glob(filepath.Join(tmp, "*", "photos.sqlite"))
		if len(files) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server made no SQLite file")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // let it reach ListenAndServe
	syscall.Kill(os.Getpid(), syscall.SIGINT)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not stop on SIGINT")
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the server left %s in the temporary directory", left[0].Name())
	}
}

// A client may choose a photo's id, but only on the shard its user_id
// names: another shard's id is refused with 422 and says why; an id taken
// already is 409; neither reply carries the database's own words.
func TestClientChosenID(t *testing.T) {
	db, plugin, err := openDB(filepath.Join(t.TempDir(), "api.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newHandler(db, plugin))
	defer srv.Close()
	post := func(body string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/photos", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		if e, ok := got["error"].(string); ok {
			return resp.StatusCode, e
		}
		return resp.StatusCode, got["id"].(string)
	}
	layout := plugin.Generator().Layout()
	at := time.Now()
	idOn := func(shard, seq int) shardid.ID {
		id, err := layout.Compose(shardid.Parts{Time: at, Shard: shard, Seq: seq})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	const user = 31341 // shard 31341 % 2000 = 1341
	own, other := idOn(1341, 1), idOn(1342, 1)

	status, msg := post(fmt.Sprintf(`{"id": "%s", "user_id": %d, "caption": "elsewhere"}`, other, user))
	if status != http.StatusUnprocessableEntity || !strings.Contains(msg, "shard 1342") || !strings.Contains(msg, "shard 1341") {
		t.Errorf("an id on another shard: %d %q, want 422 naming both shards", status, msg)
	}
	var n int64
	db.Model(&Photo{}).Where("id = ?", other).Count(&n)
	if n != 0 {
		t.Errorf("the photo with an id on another shard was stored")
	}

	if status, got := post(fmt.Sprintf(`{"id": "%s", "user_id": %d, "caption": "mine"}`, own, user)); status != http.StatusCreated || got != own.String() {
		t.Errorf("an id on the photo's shard: %d %q, want 201 and the id kept", status, got)
	}
	status, msg = post(fmt.Sprintf(`{"id": %d, "user_id": "%d", "caption": "again"}`, own, user))
	if status != http.StatusConflict || msg != fmt.Sprintf("a photo with id %s exists", own) {
		t.Errorf("an id taken already: %d %q, want 409", status, msg)
	}
	for _, driverWord := range []string{"UNIQUE", "constraint", "sqlite", "SQL"} {
		if strings.Contains(msg, driverWord) {
			t.Errorf("the reply %q carries the driver's words", msg)
		}
	}

	// A database failure is a 500 that says nothing of the database.
	sqlDB, _ := db.DB()
	sqlDB.Close()
	for _, req := range []struct{ method, path, body string }{
		{"GET", "/photos", ""},
		{"GET", "/photos/" + own.String(), ""},
		{"POST", "/photos", `{"user_id": 1, "caption": "closed"}`},
	} {
		r, _ := http.NewRequest(req.method, srv.URL+req.path, strings.NewReader(req.body))
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]string
		json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError || got["error"] != "internal error" {
			t.Errorf("%s %s on a closed database: %d %q, want 500 \"internal error\"", req.method, req.path, resp.StatusCode, got["error"])
		}
	}
}
