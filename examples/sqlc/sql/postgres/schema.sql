-- The tables of one logical shard, in the schema "app": sqlc reads them
-- from here, and the shardsql router puts each query's app.photos in the
-- shard's own schema (Config.SchemaAlias "app").
CREATE SCHEMA app;

CREATE TABLE app.photos (
    id      BIGINT PRIMARY KEY,
    user_id BIGINT NOT NULL,
    caption TEXT   NOT NULL
);
