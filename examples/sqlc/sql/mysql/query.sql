-- name: CreatePhoto :exec
INSERT INTO app.photos (id, user_id, caption) VALUES (?, ?, ?);

-- name: GetPhoto :one
SELECT id, user_id, caption FROM app.photos WHERE id = ?;

-- name: ListUserPhotos :many
SELECT id, user_id, caption FROM app.photos WHERE user_id = ? ORDER BY id;

-- name: CountPhotos :one
SELECT count(*) FROM app.photos;
