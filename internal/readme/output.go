package readme

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// OutputMarker is the line that comes right before a fenced block of shown
// output: "<!-- output: NAME -->". The block is what a test's program or
// function printed; the test reads it with OutputBlock and compares it with
// what it printed this time with SameOutput.
const OutputMarker = "<!-- output: %s -->"

// ErrNoOutputBlock is returned by OutputBlock when the file has no block
// under the marker of that name.
var ErrNoOutputBlock = errors.New("readme: no output block")

// OutputBlock returns the fenced block that follows the marker
// "<!-- output: name -->" in the Markdown file path, without its fences.
func OutputBlock(path, name string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	lines := strings.Split(string(b), "\n")
	marker := fmt.Sprintf(OutputMarker, name)
	for i, l := range lines {
		if strings.TrimSpace(l) != marker {
			continue
		}
		if i+1 >= len(lines) || !strings.HasPrefix(strings.TrimSpace(lines[i+1]), "```") {
			return "", fmt.Errorf("%w: %s:%d: the marker %q is not followed by a fenced block", ErrNoOutputBlock, path, i+1, marker)
		}
		var block []string
		for j := i + 2; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) == "```" {
				return strings.Join(block, "\n") + "\n", nil
			}
			block = append(block, lines[j])
		}
		return "", fmt.Errorf("%w: %s:%d: the block under %q is not closed", ErrNoOutputBlock, path, i+1, marker)
	}
	return "", fmt.Errorf("%w: %s has no line %q", ErrNoOutputBlock, path, marker)
}

// What changes from one run to the next: IDs (they hold the time), clock
// times and durations. Everything else of a shown output must match.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\b\d{15,20}\b`), "<id>"},
	{regexp.MustCompile(`\b\d\d:\d\d:\d\d(\.\d+)?\b`), "<time>"},
	{regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|us|ms|s)\b`), "<duration>"},
}

// Normalize replaces in s what changes from run to run (IDs, clock times,
// durations) with placeholders, and drops trailing spaces and blank lines
// at the end.
func Normalize(s string) string {
	for _, v := range volatile {
		s = v.re.ReplaceAllString(s, v.with)
	}
	lines := strings.Split(strings.TrimRight(s, "\n "), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.Join(lines, "\n")
}

// SameOutput returns nil if got, what a program printed, is the output
// shown in the block under "<!-- output: name -->" of the Markdown file path,
// but for IDs, clock times and durations; otherwise an error that shows
// both.
func SameOutput(path, name, got string) error {
	want, err := OutputBlock(path, name)
	if err != nil {
		return err
	}
	if Normalize(want) != Normalize(got) {
		return fmt.Errorf("%s shows under %q:\n%s\nbut the program printed:\n%s", path, name, want, got)
	}
	return nil
}
