package shardid

import "time"

// vector is an ID whose parts were computed by hand from its layout's formula
// (see the comments), independently of Compose and Decompose.
type vector struct {
	name   string
	layout Layout
	value  uint64 // the raw 64 bits; an ID when below 2^63
	parts  Parts
}

var vectors = []vector{
	{
		// Instagram's engineering post: "1387263000 ms since our epoch",
		// user 31341 % 2000 = shard 1341, nextval 5001 % 1024 = 905.
		// 1387263000<<23 | 1341<<10 | 905.
		name:   "instagram/published",
		layout: Instagram,
		value:  11637205501278089,
		parts: Parts{
			Time:  time.Date(2011, 1, 17, 1, 21, 3, 0, time.UTC), // 2011-01-01 + 1387263000 ms
			Shard: 1341, Seq: 905,
		},
	},
	{
		// The post's date, 2011-09-09T17:00:00Z, is really 21747600000 ms
		// after the epoch (251 days and 17 hours), not 1387263000.
		// 21747600000<<23 | 1341<<10 | 905.
		name:   "instagram/corrected",
		layout: Instagram,
		value:  182432091342174089,
		parts: Parts{
			Time:  time.Date(2011, 9, 9, 17, 0, 0, 0, time.UTC),
			Shard: 1341, Seq: 905,
		},
	},
	{
		// The sample Tweet of Twitter's API docs, created
		// "Wed Oct 10 20:19:24 +0000 2018": (id>>22)+1288834974657 =
		// 1539202764211 ms; datacenter (id>>17)&31 = 10; worker
		// (id>>12)&31 = 27; sequence id&4095 = 0.
		name:   "snowflake/tweet",
		layout: Snowflake,
		value:  1050118621198921728,
		parts: Parts{
			Time:  time.Date(2018, 10, 10, 20, 19, 24, 211e6, time.UTC),
			Shard: 10, Worker: 27, Seq: 0,
		},
	},
	{
		// 2024-03-05T06:07:08.09Z is 30008922809 units of 10 ms after
		// 2014-09-01; sequence 7 sits above machine 0xBEEF:
		// 30008922809<<24 | 7<<16 | 0xBEEF.
		name:   "sonyflake/hand",
		layout: Sonyflake,
		value:  503466179894427375,
		parts: Parts{
			Time:   time.Date(2024, 3, 5, 6, 7, 8, 90e6, time.UTC),
			Worker: 0xBEEF, Seq: 7,
		},
	},
	{
		// A Simpleflake from 2040, past 2^63: 1262286000000 ms after
		// 2000-01-01T05:00:00Z, random bits 0x5A5A5A:
		// 1262286000000<<23 | 0x5A5A5A = 10588822437893921370.
		name:   "simpleflake/unsigned",
		layout: Simpleflake,
		value:  10588822437893921370,
		parts: Parts{
			Time: time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC),
			Seq:  0x5A5A5A,
		},
	},
	{
		// The largest Instagram ID: the last millisecond before 2^40 ms,
		// shard 8191, sequence 1023.
		name:   "instagram/max",
		layout: Instagram,
		value:  1<<63 - 1,
		parts: Parts{
			Time:  time.Date(2011, 1, 1, 0, 0, 0, 0, time.UTC).Add((1<<40 - 1) * time.Millisecond),
			Shard: 8191, Seq: 1023,
		},
	},
}
