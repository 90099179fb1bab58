package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A JavaScript client (Node.js) reads and writes the API's IDs exactly.
func TestJavaScriptClientKeepsEveryDigit(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node is needed under CI=true: %v", err)
		}
		t.Skipf("SKIPPING: node not found: %v", err)
	}
	db, plugin, err := openDB(filepath.Join(t.TempDir(), "api.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newHandler(db, plugin))
	defer srv.Close()

	// An ID a float64 holds exactly (its low 10 bits zero: sequence 0, the
	// first ID of a millisecond) would not show a Number losing digits: take
	// one it does not, from a batch, whose IDs follow one another.
	var p Photo
	for i := 0; p.ID == 0; i++ {
		if i == 100 {
			t.Fatal("100 batches of IDs that a float64 holds exactly")
		}
		batch := []Photo{{UserID: 31341, Caption: "sunset"}, {UserID: 31341, Caption: "sunset"}}
		if err := db.Create(&batch).Error; err != nil {
			t.Fatal(err)
		}
		for _, b := range batch {
			if int64(float64(b.ID)) != int64(b.ID) {
				p = b
			}
		}
	}
	if p.ID < 1<<53 {
		t.Fatalf("ID %d is below 2^53: it would not test precision", p.ID)
	}
	out, err := exec.Command(node, "client.mjs", srv.URL, p.ID.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node said %s", out)
	}
	for _, check := range []string{"found", "idIsString", "bigIntExact", "numberLosesDigits", "replyToKept", "newIdIsString", "getById"} {
		if got[check] != true {
			t.Errorf("%s = %v (%s)", check, got[check], out)
		}
	}
	if got["postStatus"] != float64(201) {
		t.Errorf("POST status %v", got["postStatus"])
	}
}
