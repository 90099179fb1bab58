// Command jsonapi serves photos over a JSON HTTP API with shardid IDs. IDs
// travel as strings ("4206968292806816768"), so JavaScript clients keep
// every digit; the API accepts them back as strings or numbers.
//
//	GET  /photos          the 20 newest photos
//	GET  /photos/{id}     one photo
//	POST /photos          {"user_id": "31341", "caption": "..."} creates one
//	                      (user_id as a string or a number)
//
// A client may choose a photo's id only on the photo's own shard, the one
// its user_id names (422 otherwise), and only once (409). Errors are the
// API's own words: a database's error text is logged, never sent.
//
// It stores photos in an embedded SQLite file: by default one in a temporary
// directory, removed when the server stops (Ctrl-C).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/glebarez/sqlite"
	"github.com/shardid/shardid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Photo is the stored and served model. Its IDs are strings in JSON.
type Photo struct {
	ID      shardid.ID     `json:"id"`
	UserID  UserID         `json:"user_id" shardid:"key"`
	ReplyTo shardid.NullID `json:"reply_to"`
	Caption string         `json:"caption"`
}

// UserID is a user's id, the sharding key. Like shardid.ID it travels in JSON
// as a string, and is accepted back as a string or a number.
type UserID int64

// MarshalJSON writes u as a JSON string.
func (u UserID) MarshalJSON() ([]byte, error) {
	return strconv.AppendQuote(nil, strconv.FormatInt(int64(u), 10)), nil
}

// UnmarshalJSON reads a JSON string or number holding a whole number.
func (u *UserID) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	s := string(b)
	if bytes.HasPrefix(b, []byte(`"`)) {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("user_id %s: want a whole number, as a string or a number", b)
	}
	*u = UserID(v)
	return nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	file := flag.String("db", "", "SQLite file (default: one in a temporary directory, removed when the server stops)")
	flag.Parse()
	if err := serve(*addr, *file); err != nil {
		log.Fatal(err)
	}
}

// serve serves the API on addr until SIGINT or SIGTERM.
func serve(addr, file string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if file == "" {
		dir, err := os.MkdirTemp("", "shardid-jsonapi-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		file = filepath.Join(dir, "photos.sqlite")
	}
	db, plugin, err := openDB(file)
	if err != nil {
		return err
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	srv := &http.Server{Addr: addr, Handler: newHandler(db, plugin)}
	go func() {
		<-ctx.Done()
		srv.Shutdown(context.Background())
	}()
	log.Printf("listening on http://%s", addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func openDB(path string) (*gorm.DB, *shardid.Plugin, error) {
	// TranslateError turns a duplicate key into gorm.ErrDuplicatedKey,
	// whatever the driver's words for it.
	db, err := gorm.Open(sqlite.Open(path), &gorm.Config{Logger: logger.Discard, TranslateError: true})
	if err != nil {
		return nil, nil, err
	}
	plugin, err := shardid.NewPlugin(shardid.PluginConfig{})
	if err != nil {
		return nil, nil, err
	}
	if err := db.Use(plugin); err != nil {
		return nil, nil, err
	}
	return db, plugin, db.AutoMigrate(&Photo{})
}

// checkClientID refuses an id the client chose for p on another shard than
// the one p's user_id names: the plugin keeps an id that is set, and the
// photo would be stored, and looked up, on the wrong shard.
func checkClientID(p Photo, plugin *shardid.Plugin) error {
	if p.ID == 0 || p.UserID < 0 { // no id chosen; a negative user_id is the plugin's to refuse
		return nil
	}
	shard := int(int64(p.UserID) % int64(plugin.LogicalShards()))
	if got := plugin.Generator().Layout().Decompose(p.ID).Shard; got != shard {
		return fmt.Errorf("id %s is on shard %d, but user_id %d puts the photo on shard %d: leave id out and the server makes one",
			p.ID, got, p.UserID, shard)
	}
	return nil
}

func newHandler(db *gorm.DB, plugin *shardid.Plugin) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /photos", func(w http.ResponseWriter, r *http.Request) {
		var ps []Photo
		if err := db.WithContext(r.Context()).Order("id DESC").Limit(20).Find(&ps).Error; err != nil {
			internalError(w, r, err)
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
			if errors.Is(err, gorm.ErrRecordNotFound) {
				fail(w, http.StatusNotFound, fmt.Errorf("no photo %s", id))
				return
			}
			internalError(w, r, err)
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
		if err := checkClientID(p, plugin); err != nil {
			fail(w, http.StatusUnprocessableEntity, err)
			return
		}
		if err := db.WithContext(r.Context()).Create(&p).Error; err != nil {
			switch {
			case errors.Is(err, gorm.ErrDuplicatedKey):
				fail(w, http.StatusConflict, fmt.Errorf("a photo with id %s exists", p.ID))
			case errors.Is(err, shardid.ErrInvalidShardKey):
				// shardid's own words, such as a negative user_id.
				fail(w, http.StatusBadRequest, err)
			default:
				internalError(w, r, err)
			}
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

// fail replies with err's text: only the API's and shardid's own errors.
func fail(w http.ResponseWriter, status int, err error) {
	reply(w, status, map[string]string{"error": err.Error()})
}

// internalError logs err, which may be the database's, and replies 500
// without it: a driver's text tells a client about the schema, not about
// its request.
func internalError(w http.ResponseWriter, r *http.Request, err error) {
	log.Printf("%s %s: %v", r.Method, r.URL.Path, err)
	fail(w, http.StatusInternalServerError, errors.New("internal error"))
}
