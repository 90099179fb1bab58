package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// POST /photos takes user_id as a string or a number, as shardid.ID does,
// and refuses anything else with 400; the response carries it as a string.
func TestUserIDStringOrNumber(t *testing.T) {
	db, err := openDB(filepath.Join(t.TempDir(), "api.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newHandler(db))
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
