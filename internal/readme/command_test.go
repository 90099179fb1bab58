package readme

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// shownCommand is a line of a ```sh block that runs the command
// (go run ./cmd/shardid ...), followed by a line "# OUTPUT": what it prints.
type shownCommand struct {
	file string
	line int
	args []string
	want string
}

// shownCommands returns the commands of text's sh blocks that show their
// output on the next line.
func shownCommands(file, text string) []shownCommand {
	var cmds []shownCommand
	lines := strings.Split(text, "\n")
	inSh := false
	for i, l := range lines {
		switch t := strings.TrimSpace(l); {
		case t == "```sh":
			inSh = true
		case strings.HasPrefix(t, "```"):
			inSh = false
		case inSh && strings.HasPrefix(t, "go run ./cmd/shardid ") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "# "):
			cmd, _, _ := strings.Cut(t, " #") // a comment after the command
			cmds = append(cmds, shownCommand{file, i + 1, strings.Fields(strings.TrimPrefix(cmd, "go run ./cmd/shardid ")), strings.TrimPrefix(lines[i+1], "# ")})
		}
	}
	return cmds
}

// Every "go run ./cmd/shardid ..." of README.md and the guides that shows
// its output on the next line ("# ...") prints exactly that.
func TestShownCommandOutput(t *testing.T) {
	root := moduleRoot(t)
	var cmds []shownCommand
	for _, name := range docs(t, root) {
		text, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, shownCommands(name, string(text))...)
	}
	if len(cmds) < 2 {
		t.Fatalf("%d commands show their output, want at least 2 (the decode examples of getting started)", len(cmds))
	}
	bin := filepath.Join(t.TempDir(), "shardid")
	build := exec.Command(goTool(), "build", "-o", bin, "./cmd/shardid")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/shardid: %v\n%s", err, out)
	}
	for _, c := range cmds {
		out, err := exec.Command(bin, c.args...).Output()
		if got := strings.TrimRight(string(out), "\n"); err != nil || got != c.want {
			t.Errorf("%s:%d: shardid %s printed %q (%v), the guide shows %q", c.file, c.line, strings.Join(c.args, " "), got, err, c.want)
		}
	}
}

func TestShownCommandsParse(t *testing.T) {
	got := shownCommands("x.md", "```sh\ngo run ./cmd/shardid decode 5   # five\n# 5 layout=x\ngo run ./cmd/shardid new\n```\n# not a command\n")
	if len(got) != 1 || strings.Join(got[0].args, " ") != "decode 5" || got[0].want != "5 layout=x" || got[0].line != 2 {
		t.Errorf("shownCommands = %+v", got)
	}
}
