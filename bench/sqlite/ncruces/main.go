// Command ncruces times the workload of package sqlite on the ncruces driver.
package main

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	_ "github.com/ncruces/go-sqlite3/driver"
	"github.com/shardid/shardid/bench/sqlite"
)

func main() {
	dir, err := os.MkdirTemp("", "sqlite-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite3", fmt.Sprintf("file:%s?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)", filepath.Join(dir, "t.db")))
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
	fmt.Printf("ncruces (SQLite %s): 20000 rows in 200 transactions, read back: %v\n", v, took)
}
