package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardid/shardid/internal/readme"
)

// The README's curl session, run against the API: what README shows is what
// the API answers, but for the IDs.
func TestREADMECurlSession(t *testing.T) {
	db, err := openDB(filepath.Join(t.TempDir(), "api.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	srv := httptest.NewServer(newHandler(db))
	defer srv.Close()
	var out strings.Builder
	for _, body := range []string{`{"user_id":"31341","caption":"sunset"}`, `{"user_id":31341,"caption":"a number works too"}`, ""} {
		var resp *http.Response
		if body != "" {
			fmt.Fprintf(&out, "$ curl -s localhost:8080/photos -d '%s'\n", body)
			// curl -d posts as a form; the API reads the body as JSON either way.
			resp, err = http.Post(srv.URL+"/photos", "application/x-www-form-urlencoded", strings.NewReader(body))
		} else {
			fmt.Fprintf(&out, "$ curl -s localhost:8080/photos\n")
			resp, err = http.Get(srv.URL + "/photos")
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		out.Write(b)
	}
	if err := readme.SameOutput("README.md", "curl", out.String()); err != nil {
		t.Error(err)
	}
}
