-- name: CreatePhoto :one
INSERT INTO app.photos (id, user_id, caption) VALUES ($1, $2, $3)
RETURNING id, user_id, caption;

-- name: GetPhoto :one
SELECT id, user_id, caption FROM app.photos WHERE id = $1;

-- name: ListUserPhotos :many
SELECT id, user_id, caption FROM app.photos WHERE user_id = $1 ORDER BY id;

-- name: CountPhotos :one
SELECT count(*) FROM app.photos;
