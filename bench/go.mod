module github.com/shardid/shardid/bench

go 1.26.0

replace github.com/shardid/shardid => ../

require (
	github.com/bwmarrin/snowflake v0.3.0
	github.com/google/uuid v1.6.0
	github.com/rs/xid v1.6.0
	github.com/shardid/shardid v0.0.0-00010101000000-000000000000
	github.com/sony/sonyflake v1.2.0
)

require (
	github.com/jinzhu/inflection v1.0.0 // indirect
	github.com/jinzhu/now v1.1.5 // indirect
	golang.org/x/text v0.29.0 // indirect
	gorm.io/gorm v1.31.2 // indirect
)
