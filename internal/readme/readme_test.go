package readme

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A README block is one ```go fence. The line before it may name where the
// block comes from:
//
//	<!-- example: FILE FUNC -->
//
// means the block is the body of function FUNC in FILE (relative to the
// module root), word for word: a runnable example, so its // Output: is
// checked by go test. Every other block is a fragment: it is compiled as the
// body of a function of its own, in one scratch package, next to the names
// README's snippets use without defining them (fragmentEnv).
type block struct {
	line   int    // the line of README.md the code starts on
	code   string // the code, without the fences
	source string // "FILE FUNC" from the marker, or ""
}

var marker = regexp.MustCompile(`^<!-- example: (\S+) (\S+) -->$`)

// goBlocks returns README's ```go blocks.
func goBlocks(readme string) []block {
	var blocks []block
	lines := strings.Split(readme, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		b := block{line: i + 2}
		if i > 0 {
			if m := marker.FindStringSubmatch(strings.TrimSpace(lines[i-1])); m != nil {
				b.source = m[1] + " " + m[2]
			}
		}
		var code []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			code = append(code, lines[i])
		}
		b.code = strings.Join(code, "\n")
		blocks = append(blocks, b)
	}
	return blocks
}

// fragmentEnv are the imports and the names README's fragments use without
// defining them: the databases, the models of "Use with GORM", and the
// router of "Sharding".
const fragmentEnv = `package snippets

import (
	"context"
	"log"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// The names README's snippets use without defining them.
var (
	ctx                     = context.Background()
	err                     error
	db, pg1, pg2, catalogDB *gorm.DB
	userID                  int64 = 31341
	workerID, worker        int
	layout                  = shardid.Instagram
	plugin                  *shardid.Plugin
	router                  *shardid.Router
	id                      shardid.ID
	photo, p                Photo
	onError                 = func(err error) { log.Print(err) }
)

type Photo struct {
	ID       shardid.ID
	UserID   int64 ` + "`shardid:\"key\"`" + `
	Caption  string
	Comments []Comment
}

type Comment struct {
	ID      shardid.ID
	PhotoID shardid.ID ` + "`shardid:\"key\"`" + `
	ReplyTo shardid.NullID
	Body    string
}
`

// envNames are the names fragmentEnv defines.
var envNames = map[string]bool{"ctx": true, "err": true, "db": true, "pg1": true, "pg2": true, "catalogDB": true,
	"userID": true, "workerID": true, "worker": true, "layout": true, "plugin": true, "router": true, "id": true,
	"photo": true, "p": true, "onError": true, "Photo": true, "Comment": true}

// knownImports are the packages README's fragments may use by their name,
// besides the module's own packages (shardid, and every directory of the
// module by its name, such as a package beside the root).
var knownImports = map[string]string{
	"context": "context", "errors": "errors", "fmt": "fmt", "log": "log", "os": "os", "slog": "log/slog",
	"strings": "strings", "sync": "sync", "time": "time", "json": "encoding/json", "http": "net/http", "sql": "database/sql",
	"gorm": "gorm.io/gorm", "clause": "gorm.io/gorm/clause", "logger": "gorm.io/gorm/logger",
	"dbresolver": "gorm.io/plugin/dbresolver", "postgres": "gorm.io/driver/postgres", "mysql": "gorm.io/driver/mysql",
	"sqlite": "github.com/glebarez/sqlite", "redis": "github.com/redis/go-redis/v9",
}

// fragmentFiles returns the scratch package: fragmentEnv, and a file per
// fragment holding it as the body of a function of its own, with the imports
// it uses. //line directives make the compiler's messages point into
// README.md. Names a fragment defines at its top level are used once at its
// end, so a snippet may define a name it does not use again.
func fragmentFiles(root, readmePath string, blocks []block) map[string]string {
	module := modulePath(root)
	files := map[string]string{"env.go": fragmentEnv}
	for i, bl := range blocks {
		if bl.source != "" {
			continue
		}
		var b strings.Builder
		b.WriteString("package snippets\n\nimport (\n")
		for _, name := range qualifiers(bl.code) {
			if path, ok := knownImports[name]; ok {
				fmt.Fprintf(&b, "\t%q\n", path)
			} else if name == "shardid" {
				fmt.Fprintf(&b, "\t%q\n", module)
			} else if isPackageDir(filepath.Join(root, name)) {
				fmt.Fprintf(&b, "\t%q\n", module+"/"+name)
			}
		}
		fmt.Fprintf(&b, ")\n\nfunc snippet%d() {\n//line %s:%d\n%s\n", i, readmePath, bl.line, bl.code)
		for _, name := range topLevelNames(bl.code) {
			fmt.Fprintf(&b, "\t_ = %s\n", name)
		}
		b.WriteString("}\n")
		files[fmt.Sprintf("snippet%02d.go", i)] = b.String()
	}
	return files
}

// qualifiers returns the names code uses as X in X.Y that it does not define
// itself and that fragmentEnv does not define: the packages it uses.
func qualifiers(code string) []string {
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc f() {\n"+code+"\n}", 0)
	if err != nil {
		return nil
	}
	defined := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, l := range n.Lhs {
					if id, ok := l.(*ast.Ident); ok {
						defined[id.Name] = true
					}
				}
			}
		case *ast.ValueSpec:
			for _, id := range n.Names {
				defined[id.Name] = true
			}
		case *ast.TypeSpec:
			defined[n.Name.Name] = true
		case *ast.Field:
			for _, id := range n.Names {
				defined[id.Name] = true
			}
		case *ast.RangeStmt:
			for _, e := range []ast.Expr{n.Key, n.Value} {
				if id, ok := e.(*ast.Ident); ok && n.Tok == token.DEFINE {
					defined[id.Name] = true
				}
			}
		}
		return true
	})
	seen := map[string]bool{}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && !defined[id.Name] && !envNames[id.Name] && !seen[id.Name] {
				seen[id.Name] = true
				names = append(names, id.Name)
			}
		}
		return true
	})
	return names
}

// modulePath reads the module's path from its go.mod.
func modulePath(root string) string {
	b, _ := os.ReadFile(filepath.Join(root, "go.mod"))
	for _, line := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(line, "module "); ok {
			return strings.TrimSpace(m)
		}
	}
	return ""
}

// isPackageDir reports whether dir holds a Go package.
func isPackageDir(dir string) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	return len(files) > 0
}

// topLevelNames returns the names code defines outside any block ("x, err
// := ..." and "var x T"). Code that does not parse defines none: the
// compiler reports it.
func topLevelNames(code string) []string {
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc f() {\n"+code+"\n}", 0)
	if err != nil {
		return nil
	}
	var names []string
	add := func(id *ast.Ident) {
		if id.Name != "_" {
			names = append(names, id.Name)
		}
	}
	for _, s := range f.Decls[0].(*ast.FuncDecl).Body.List {
		switch s := s.(type) {
		case *ast.AssignStmt:
			if s.Tok == token.DEFINE {
				for _, l := range s.Lhs {
					if id, ok := l.(*ast.Ident); ok {
						add(id)
					}
				}
			}
		case *ast.DeclStmt:
			if g, ok := s.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
				for _, spec := range g.Specs {
					for _, id := range spec.(*ast.ValueSpec).Names {
						add(id)
					}
				}
			}
		}
	}
	return names
}

// moduleRoot is the directory of go.mod, two levels up.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
	return root
}

// buildFragments type-checks and vets the fragments of readme (named
// readmePath in messages) in a scratch package inside the module, with one go
// vet, and returns its output when it fails.
func buildFragments(t *testing.T, readmePath, readme string) error {
	t.Helper()
	root := moduleRoot(t)
	// Inside the module, so its go.mod resolves the imports; "_" keeps the
	// directory out of ./... patterns.
	dir, err := os.MkdirTemp(root, "_readme-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for name, src := range fragmentFiles(root, readmePath, goBlocks(readme)) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(goTool(), "vet", ".")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	return nil
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	// go test puts its own go on PATH; this is a last resort.
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

// docs returns the documents whose snippets the tests keep true:
// README.md and every guide in docs/, relative to root.
func docs(t *testing.T, root string) []string {
	guides, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, g := range guides {
		rel, _ := filepath.Rel(root, g)
		files = append(files, rel)
	}
	return files
}

// TestREADMESnippetsCompile type-checks (and vets) every Go fragment of
// README.md and of the guides in docs/ against the library, a go vet per
// document.
func TestREADMESnippetsCompile(t *testing.T) {
	root := moduleRoot(t)
	for _, name := range docs(t, root) {
		text, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		blocks := goBlocks(string(text))
		if name == "README.md" && len(blocks) < 3 {
			t.Fatalf("README.md has %d Go blocks: is this the right file?", len(blocks))
		}
		if len(blocks) == 0 {
			continue
		}
		if err := buildFragments(t, filepath.Join(root, name), string(text)); err != nil {
			t.Errorf("%s's Go snippets do not compile: %v", name, err)
		}
	}
}

// TestREADMEQuotesExamples checks that each block marked "<!-- example: FILE
// FUNC -->" is the body of FUNC in FILE, so README shows code that runs as a
// test, with its output checked.
func TestREADMEQuotesExamples(t *testing.T) {
	root := moduleRoot(t)
	quoted := map[string]int{} // "README.md" and "docs/"
	for _, name := range docs(t, root) {
		text, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range goBlocks(string(text)) {
			if b.source == "" {
				continue
			}
			quoted[strings.SplitAfter(name, "/")[0]]++
			file, fn, _ := strings.Cut(b.source, " ")
			body, err := funcBody(filepath.Join(root, file), fn)
			if err != nil {
				t.Errorf("%s:%d: %v", name, b.line, err)
				continue
			}
			if body != b.code {
				t.Errorf("%s:%d differs from the body of %s in %s:\n--- %s\n%s\n--- %s\n%s", name, b.line, fn, file, name, b.code, file, body)
			}
		}
	}
	if quoted["README.md"] < 2 {
		t.Errorf("README.md quotes %d examples, want at least 2 (Use with GORM, IDs without a database)", quoted["README.md"])
	}
	if quoted["docs/"] < 4 {
		t.Errorf("the guides quote %d examples, want at least 4 (Use, Growing safely, Moving a logical shard, Monitoring)", quoted["docs/"])
	}
}

// funcBody returns the body of the function named fn in file, without its
// braces and with one level of indentation removed.
func funcBody(file, fn string) (string, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		return "", err
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == fn && fd.Recv == nil {
			start := fset.Position(fd.Body.Lbrace).Offset + 1
			end := fset.Position(fd.Body.Rbrace).Offset
			lines := strings.Split(strings.Trim(string(src[start:end]), "\n"), "\n")
			for i, l := range lines {
				lines[i] = strings.TrimPrefix(l, "\t")
			}
			return strings.Join(lines, "\n"), nil
		}
	}
	return "", fmt.Errorf("%s has no function %s", file, fn)
}

// The checker itself: a snippet that does not compile fails the build, with
// the README line; a marked block that differs from its example is found.
func TestREADMECheckerFails(t *testing.T) {
	readme := "# x\n\n```go\ng, err := shardid.NewGenerator(shardid.Instagram)\n```\n\ntext\n\n```go\n" +
		"g, _ := shardid.NewGenerator(shardid.Instagram)\nid, err := g.Next(1)\nid.NoSuchMethod()\n```\n"
	err := buildFragments(t, "README.md", readme)
	if err == nil || !strings.Contains(err.Error(), "README.md:12") || !strings.Contains(err.Error(), "NoSuchMethod") {
		t.Fatalf("a snippet that does not compile: %v", err)
	}
	// Each fragment imports what it uses: here fmt, strings and errors, and
	// a local variable named like a package (sql) is no import.
	good := strings.Replace(readme, "id.NoSuchMethod()",
		"fmt.Println(id.Shard(), strings.ToUpper(\"x\"), errors.Is(err, shardid.ErrSyntax))\nsql := g\n_, _ = sql.Next(2)", 1)
	if err := buildFragments(t, "README.md", good); err != nil {
		t.Fatalf("the fixed snippets: %v", err)
	}
	if got := goBlocks("<!-- example: example_test.go Example -->\n```go\nx\n```\n"); len(got) != 1 || got[0].source != "example_test.go Example" || got[0].code != "x" {
		t.Errorf("a marked block: %+v", got)
	}
	var buf bytes.Buffer
	buf.WriteString("package p\n\nfunc F() {\n\tx := 1\n\t_ = x\n}\n")
	file := filepath.Join(t.TempDir(), "f.go")
	os.WriteFile(file, buf.Bytes(), 0o600)
	if body, err := funcBody(file, "F"); err != nil || body != "x := 1\n_ = x" {
		t.Errorf("funcBody = %q, %v", body, err)
	}
}

var outputMarker = regexp.MustCompile(`(?m)^<!-- output: (.+) -->$`)

// Every example's README shows what the program prints, under an output
// marker, and a test of the example compares it (readme.SameOutput with
// that README and that name); every output marker of README.md and the
// guides is followed by a block.
func TestExamplesShowTheirOutput(t *testing.T) {
	root := moduleRoot(t)
	dirs, err := filepath.Glob(filepath.Join(root, "examples", "*", "README.md"))
	if err != nil || len(dirs) < 4 {
		t.Fatalf("examples with a README: %v, %v", dirs, err)
	}
	for _, path := range dirs {
		dir := filepath.Dir(path)
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		names := outputMarker.FindAllStringSubmatch(string(text), -1)
		if len(names) == 0 {
			t.Errorf("%s shows no output (no line <!-- output: NAME -->)", path)
		}
		tests, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
		var src strings.Builder
		for _, f := range tests {
			b, _ := os.ReadFile(f)
			src.Write(b)
		}
		for _, m := range names {
			if _, err := OutputBlock(path, m[1]); err != nil {
				t.Error(err)
			}
			if call := fmt.Sprintf("readme.SameOutput(%q, %q,", "README.md", m[1]); !strings.Contains(src.String(), call) {
				t.Errorf("%s shows the output %q, but no test in %s compares it (%s ...)", path, m[1], dir, call)
			}
		}
	}
	for _, name := range docs(t, root) {
		path := filepath.Join(root, name)
		text, _ := os.ReadFile(path)
		for _, m := range outputMarker.FindAllStringSubmatch(string(text), -1) {
			if _, err := OutputBlock(path, m[1]); err != nil {
				t.Error(err)
			}
		}
	}
}

// SameOutput ignores IDs, clock times and durations, and nothing else.
func TestSameOutput(t *testing.T) {
	file := filepath.Join(t.TempDir(), "R.md")
	os.WriteFile(file, []byte("x\n\n<!-- output: run -->\n```text\nphoto 4209052497351078912 shard 1341 made 09:15:57.891 in 12ms\n```\n"), 0o600)
	if err := SameOutput(file, "run", "photo 4209052497351078999 shard 1341 made 10:01:02.003 in 3.5s\n"); err != nil {
		t.Errorf("IDs, times and durations differ only: %v", err)
	}
	if err := SameOutput(file, "run", "photo 4209052497351078999 shard 1342 made 10:01:02.003 in 3.5s\n"); err == nil {
		t.Error("another shard passed")
	}
	if err := SameOutput(file, "other", ""); !errors.Is(err, ErrNoOutputBlock) {
		t.Errorf("a missing block: %v", err)
	}
}
