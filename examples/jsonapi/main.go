// Command jsonapi serves photos over a JSON HTTP API with shardid IDs. IDs
// travel as strings ("4206968292806816768"), so JavaScript clients keep
// every digit; the API accepts them back as strings or numbers.
//
//	GET  /photos          the 20 newest photos
//	GET  /photos/{id}     one photo
//	POST /photos          {"user_id": "31341", "caption": "..."} creates one
//
// It stores photos in an embedded SQLite file.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"path/filepath"

	"github.com/glebarez/sqlite"
	"github.com/shardid/shardid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Photo is the stored and served model. Its IDs are strings in JSON.
type Photo struct {
	ID      shardid.ID     `json:"id"`
	UserID  int64          `json:"user_id,string" shardid:"key"`
	ReplyTo shardid.NullID `json:"reply_to"`
	Caption string         `json:"caption"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	file := flag.String("db", filepath.Join(os.TempDir(), "shardid-jsonapi.sqlite"), "SQLite file")
	flag.Parse()
	db, err := openDB(*file)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("listening on http://%s", *addr)
	log.Fatal(http.ListenAndServe(*addr, newHandler(db)))
}

func openDB(path string) (*gorm.DB, error) {
	db, err := gorm.Open(sqlite.Open(path), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, err
	}
	plugin, err := shardid.NewPlugin(shardid.PluginConfig{})
	if err != nil {
		return nil, err
	}
	if err := db.Use(plugin); err != nil {
		return nil, err
	}
	return db, db.AutoMigrate(&Photo{})
}

func newHandler(db *gorm.DB) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /photos", func(w http.ResponseWriter, r *http.Request) {
		var ps []Photo
		if err := db.WithContext(r.Context()).Order("id DESC").Limit(20).Find(&ps).Error; err != nil {
			fail(w, http.StatusInternalServerError, err)
			return
		}
		reply(w, http.StatusOK, ps)
	})
	mux.HandleFunc("GET /photos/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := shardid.Parse(r.PathValue("id"))
		if err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		var p Photo
		if err := db.WithContext(r.Context()).First(&p, id).Error; err != nil {
			status := http.StatusInternalServerError
			if errors.Is(err, gorm.ErrRecordNotFound) {
				status = http.StatusNotFound
			}
			fail(w, status, err)
			return
		}
		reply(w, http.StatusOK, p)
	})
	mux.HandleFunc("POST /photos", func(w http.ResponseWriter, r *http.Request) {
		var p Photo
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		if err := db.WithContext(r.Context()).Create(&p).Error; err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		reply(w, http.StatusCreated, p)
	})
	return mux
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, err error) {
	reply(w, status, map[string]string{"error": err.Error()})
}
