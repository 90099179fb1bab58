package shardid

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// PodIndexLabel is the label Kubernetes (1.28 and later) puts on each pod of
// a StatefulSet: the pod's ordinal, "3" for the pod web-3.
const PodIndexLabel = "apps.kubernetes.io/pod-index"

// WorkerFromHostname returns the worker id that the host name carries as a
// StatefulSet ordinal, as WorkerFromPodName does: a pod's host name is its
// name, so the pod web-3 is worker 3.
func WorkerFromHostname(l Layout) (int, error) {
	name, err := os.Hostname()
	if err != nil {
		return 0, fmt.Errorf("%w: reading the host name: %w", ErrNoOrdinal, err)
	}
	return WorkerFromPodName(name, l)
}

// WorkerFromPodName returns the ordinal at the end of a StatefulSet pod's
// name as a worker id: "web-3" is 3, "web-0.web.prod.svc.cluster.local" is
// 0 (a fully qualified host name is cut at its first dot). It checks that
// the ordinal fits l's worker bits (ErrWorkerRange).
//
// A name that does not end in a dash and a canonical decimal number (no
// sign, no leading zero) is refused with ErrNoOrdinal. Only a StatefulSet
// gives its pods ordinals: the random suffix of a Deployment's pod
// ("web-7c9f8d6b5-x2x4k") is refused, but one that happens to be all digits
// ("web-7c9f8d6b5-24567") would be read as a number, so do not use this
// outside a StatefulSet (use a Lease there).
func WorkerFromPodName(name string, l Layout) (int, error) {
	host, _, _ := strings.Cut(name, ".")
	i := strings.LastIndexByte(host, '-')
	if i <= 0 {
		return 0, withDetail(ErrNoOrdinal, strconv.Quote(name)+" does not end in -N")
	}
	w, err := parseOrdinal(host[i+1:])
	if err != nil {
		return 0, withDetail(ErrNoOrdinal, strconv.Quote(name)+" does not end in -N")
	}
	return checkedWorker(w, l)
}

// WorkerFromFile reads a worker id from a file that the Kubernetes downward
// API writes into a pod's volume. The file holds either the pod index alone
// (an item whose fieldPath is metadata.labels['apps.kubernetes.io/pod-index'])
// or all of the pod's labels, one key="value" a line (fieldPath
// metadata.labels), of which it takes PodIndexLabel. It checks that the id
// fits l's worker bits (ErrWorkerRange).
//
// A file that is empty (the label is not set: not a StatefulSet pod, or a
// Kubernetes before 1.28) or has no PodIndexLabel line is refused with
// ErrNoOrdinal, a value that is not a canonical decimal number with
// ErrWorkerRange.
func WorkerFromFile(path string, l Layout) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoOrdinal, err)
	}
	v := string(bytes.TrimSpace(b))
	if strings.Contains(v, "=") {
		var ok bool
		if v, ok = labelValue(b, PodIndexLabel); !ok {
			return 0, withDetail(ErrNoOrdinal, path+" has no "+PodIndexLabel+" label")
		}
	}
	if v == "" {
		return 0, withDetail(ErrNoOrdinal, path+" is empty: the pod has no "+PodIndexLabel+" label")
	}
	w, err := parseOrdinal(v)
	if err != nil {
		return 0, withDetail(ErrWorkerRange, path+": "+strconv.Quote(v)+" is not a worker id")
	}
	return checkedWorker(w, l)
}

// checkedWorker returns w if it fits l's worker bits, or 0 and
// ErrWorkerRange.
func checkedWorker(w int, l Layout) (int, error) {
	if err := l.checkWorker(w); err != nil {
		return 0, err
	}
	return w, nil
}

// labelValue finds key in a downward API labels file: lines of
// key="value", the value quoted as Go quotes strings. A value that is not
// quoted is returned as it is.
func labelValue(b []byte, key string) (string, bool) {
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || k != key {
			continue
		}
		if s, err := strconv.Unquote(v); err == nil {
			return s, true
		}
		return v, true
	}
	return "", false
}

// parseOrdinal parses a canonical decimal number that fits an int.
func parseOrdinal(s string) (int, error) {
	v, err := parseDigits(s)
	if err != nil || v > math.MaxInt {
		return 0, ErrSyntax
	}
	return int(v), nil
}
