package readme

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// mdLink matches a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocLinksResolve: every link of README.md and of the guides to a file
// of the repository names a file that exists, and every #anchor names a
// heading of its document, as GitHub renders them, so that no guide sends a
// reader to a section that was renamed or moved.
func TestDocLinksResolve(t *testing.T) {
	root := moduleRoot(t)
	anchors := map[string]map[string]bool{} // document (relative to root) -> its anchors
	anchorsOf := func(doc string) map[string]bool {
		if a, ok := anchors[doc]; ok {
			return a
		}
		a := headingAnchors(t, filepath.Join(root, doc))
		anchors[doc] = a
		return a
	}
	checked := 0
	for _, doc := range docs(t, root) {
		text, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(withoutCode(string(text)), "\n") {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				dest := doc
				if file != "" {
					dest = filepath.Join(filepath.Dir(doc), file)
					if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
						t.Errorf("%s:%d: link %q: no such file %s", doc, i+1, target, dest)
						continue
					}
				}
				checked++
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s:%d: link %q: an anchor into a file that is not Markdown", doc, i+1, target)
					continue
				}
				if !anchorsOf(dest)[anchor] {
					t.Errorf("%s:%d: link %q: %s has no heading #%s", doc, i+1, target, dest, anchor)
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d links: is the pattern right?", checked)
	}
}

// withoutCode blanks the lines inside ``` fences, keeping the line count.
func withoutCode(text string) string {
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			lines[i] = ""
			continue
		}
		if in {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// headingAnchors returns the anchors GitHub gives the headings of the
// Markdown file path: lower case, punctuation dropped but for hyphens and
// underscores, spaces as hyphens, a repeated anchor suffixed -1, -2, ...
func headingAnchors(t *testing.T, path string) map[string]bool {
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range strings.Split(withoutCode(string(text)), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		if title == "" || !strings.HasPrefix(strings.TrimLeft(line, "#"), " ") {
			continue
		}
		a := anchorOf(title)
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// anchorOf is GitHub's anchor for a heading's text.
func anchorOf(title string) string {
	// Inline code and emphasis marks go; a link keeps its text.
	title = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(title, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
