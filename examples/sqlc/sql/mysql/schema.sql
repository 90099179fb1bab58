-- The tables of one logical shard, in the database "app" (MySQL's schema):
-- sqlc reads them from here, and the shardsql router puts each query's
-- app.photos in the shard's own database (Config.SchemaAlias "app").
CREATE DATABASE app;

CREATE TABLE app.photos (
    id      BIGINT       PRIMARY KEY,
    user_id BIGINT       NOT NULL,
    caption VARCHAR(200) NOT NULL
);
