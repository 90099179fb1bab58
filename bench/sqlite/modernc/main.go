// Command modernc times the workload of package sqlite on the modernc driver.
package main

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/shardid/shardid/bench/sqlite"
	_ "modernc.org/sqlite"
)

func main() {
	dir, err := os.MkdirTemp("", "sqlite-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", fmt.Sprintf("file:%s?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)", filepath.Join(dir, "t.db")))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	var v string
	if err := db.QueryRow("SELECT sqlite_version()").Scan(&v); err != nil {
		log.Fatal(err)
	}
	took, err := sqlite.Run(context.Background(), db, 20000, 100)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("modernc (SQLite %s): 20000 rows in 200 transactions, read back: %v\n", v, took)
}
