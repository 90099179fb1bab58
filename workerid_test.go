package shardid_test

import (
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"testing"

	"github.com/shardid/shardid"
)

func TestWorkerFromPodName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want int
		err  error
	}{
		{"web-0", 0, nil},
		{"web-3", 3, nil},
		{"web-7", 7, nil},
		{"my-app-db-5", 5, nil},                      // dashes in the StatefulSet's name
		{"web-2.web.prod.svc.cluster.local", 2, nil}, // a fully qualified host name
		{"web-8", 0, shardid.ErrWorkerRange},         // 3 worker bits: 0 to 7
		{"web-99999999999999999999", 0, shardid.ErrNoOrdinal},
		{"web", 0, shardid.ErrNoOrdinal},
		{"web-", 0, shardid.ErrNoOrdinal},
		{"-3", 0, shardid.ErrNoOrdinal},
		{"3", 0, shardid.ErrNoOrdinal},
		{"", 0, shardid.ErrNoOrdinal},
		{"web-03", 0, shardid.ErrNoOrdinal},              // not how Kubernetes writes ordinals
		{"web-+3", 0, shardid.ErrNoOrdinal},              // nor this
		{"web-7c9f8d6b5-x2x4k", 0, shardid.ErrNoOrdinal}, // a Deployment's pod
		{"web-3x", 0, shardid.ErrNoOrdinal},
		{"web-3.", 3, nil},
		{"web.prod-3", 0, shardid.ErrNoOrdinal}, // the dash is past the host name
	} {
		w, err := shardid.WorkerFromPodName(tc.name, eightWorkers)
		if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) || w != tc.want {
			t.Errorf("WorkerFromPodName(%q) = %d, %v; want %d, %v", tc.name, w, err, tc.want, tc.err)
		}
		if err != nil && w != 0 {
			t.Errorf("WorkerFromPodName(%q) = %d with an error", tc.name, w)
		}
	}
	// A layout without worker bits has one worker id, 0.
	if w, err := shardid.WorkerFromPodName("web-0", shardid.Instagram); w != 0 || err != nil {
		t.Errorf("web-0 on Instagram: %d, %v", w, err)
	}
	if _, err := shardid.WorkerFromPodName("web-1", shardid.Instagram); !errors.Is(err, shardid.ErrWorkerRange) {
		t.Errorf("web-1 on Instagram: %v, want ErrWorkerRange", err)
	}
}

func TestWorkerFromHostname(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	want, wantErr := shardid.WorkerFromPodName(host, eightWorkers)
	got, err := shardid.WorkerFromHostname(eightWorkers)
	if got != want || fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Errorf("WorkerFromHostname() = %d, %v on host %q; WorkerFromPodName gives %d, %v", got, err, host, want, wantErr)
	}
}

func TestWorkerFromFile(t *testing.T) {
	dir := t.TempDir()
	labels := "app=\"web\"\n" +
		"apps.kubernetes.io/pod-index=\"5\"\n" +
		"controller-revision-hash=\"web-6c7b9f\"\n" +
		"statefulset.kubernetes.io/pod-name=\"web-5\"\n"
	for _, tc := range []struct {
		name, content string
		want          int
		err           error
	}{
		{"index", "3", 3, nil},
		{"index-newline", "3\n", 3, nil},
		{"labels", labels, 5, nil},
		{"labels-unquoted", "apps.kubernetes.io/pod-index=6\n", 6, nil},
		{"empty", "", 0, shardid.ErrNoOrdinal},
		{"spaces", " \n", 0, shardid.ErrNoOrdinal},
		{"labels-without", "app=\"web\"\npod-template-hash=\"7c9f8d6b5\"\n", 0, shardid.ErrNoOrdinal},
		{"labels-other-key", "x.apps.kubernetes.io/pod-index=\"1\"\n", 0, shardid.ErrNoOrdinal},
		{"labels-empty-value", "apps.kubernetes.io/pod-index=\"\"\n", 0, shardid.ErrNoOrdinal},
		{"out-of-range", "8", 0, shardid.ErrWorkerRange},
		{"labels-out-of-range", "apps.kubernetes.io/pod-index=\"12\"\n", 0, shardid.ErrWorkerRange},
		{"negative", "-1", 0, shardid.ErrWorkerRange},
		{"word", "three", 0, shardid.ErrWorkerRange},
		{"leading-zero", "03", 0, shardid.ErrWorkerRange},
	} {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		w, err := shardid.WorkerFromFile(path, eightWorkers)
		if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) || w != tc.want {
			t.Errorf("%s %q: %d, %v; want %d, %v", tc.name, tc.content, w, err, tc.want, tc.err)
		}
	}
	_, err := shardid.WorkerFromFile(filepath.Join(dir, "missing"), eightWorkers)
	if !errors.Is(err, shardid.ErrNoOrdinal) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want ErrNoOrdinal and fs.ErrNotExist", err)
	}
}

// The downward API sets an env var to "" for a label the pod lacks.
func TestWorkerFromEnvEmpty(t *testing.T) {
	t.Setenv("SHARDID_POD_INDEX", "")
	w, err := shardid.WorkerFromEnv("SHARDID_POD_INDEX", eightWorkers)
	if !errors.Is(err, shardid.ErrNoWorker) || w != 0 {
		t.Errorf("an empty variable: %d, %v, want ErrNoWorker", w, err)
	}
}

func ExampleWorkerFromPodName() {
	// Eight pods at most: 3 worker bits.
	layout, _ := shardid.Instagram.WithWorkerBits(3)
	for _, name := range []string{"web-3", "web-8", "web-7c9f8d6b5-x2x4k"} {
		w, err := shardid.WorkerFromPodName(name, layout)
		fmt.Println(name, w, err)
	}
	// Output:
	// web-3 3 <nil>
	// web-8 0 shardid: worker out of range: 8 is not in [0, 8)
	// web-7c9f8d6b5-x2x4k 0 shardid: no StatefulSet pod ordinal: "web-7c9f8d6b5-x2x4k" does not end in -N
}

func ExampleWorkerFromHostname() {
	layout, _ := shardid.Instagram.WithWorkerBits(3)
	// In the pod web-3 of a StatefulSet, the host name is web-3.
	w, err := shardid.WorkerFromHostname(layout)
	if err != nil {
		log.Fatal(err)
	}
	g, err := shardid.NewGenerator(layout, shardid.WithWorker(w))
	if err != nil {
		log.Fatal(err)
	}
	_ = g
}

func ExampleWorkerFromFile() {
	// The downward API writes the pod's labels to a file; the StatefulSet
	// controller gives each pod its index as a label.
	dir, _ := os.MkdirTemp("", "podinfo")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "labels")
	os.WriteFile(path, []byte("app=\"web\"\napps.kubernetes.io/pod-index=\"3\"\n"), 0o644)

	layout, _ := shardid.Instagram.WithWorkerBits(3)
	w, err := shardid.WorkerFromFile(path, layout)
	fmt.Println(w, err)
	// Output:
	// 3 <nil>
}
