// Package reshard moves logical shards between the physical databases of a
// [shardid.Router] while the application keeps writing, and keeps the
// shard map where every process can read it.
//
// # The catalog
//
// A [Catalog] is a table in a PostgreSQL or MySQL/MariaDB database that
// holds the shard map and a version that changes with every change.
// [Follow] loads it into a router and keeps it current (on PostgreSQL it
// listens for the catalog's notifications, with pgx, once it has proved
// they arrive; through a pooler in transaction mode it polls and reports
// [ErrListenUnavailable], and [FollowWith] can listen on a direct
// connection instead). [LoadMapFile] and [WriteMapFile] keep a static map
// in a JSON file instead.
//
// # Moves
//
// [MoveShard] copies a shard to another database, fences the old copy
// (writes to it fail with [shardid.ErrShardMoving]), verifies both sides,
// fences the old copy for good and flips the map in the catalog and the
// router. [Fence], [Unfence] and [DropShardCopy] are the manual steps
// around it.
//
// # Rebalancing
//
// [Sizes] measures every shard, bytes and rows, with one catalog query per
// database; [PlanRebalance] plans the moves that even the databases out
// (or drain one, or fill a new one) and changes nothing; [Plan.Apply]
// carries a plan out move by move, with progress, and can be run again
// after an interruption. The shardid rebalance command does all three.
//
// # Splitting a monolith
//
// [PlanSplit] is the dry run of a split of a monolith (one database whose
// shards are shardmap.Placement.Shared in its own tables) into a schema
// per shard on other databases, and refuses what cannot be split safely
// ([ErrSplitRefused]); [RunSplit] carries the plan out a batch at a time
// ([SplitShards]) while the application writes; [AbortSplit],
// [CleanSplit] and [ReadSplitStatus] are the other steps. The shardid
// split command does all of them.
//
// # Privileges
//
// Setting up runs DDL; running does not. [Catalog.Setup] creates the
// catalog's tables (Save and SaveSetup do too, when they are missing and
// the role may); Load, Version, LoadSetup and Follow only read, with
// SELECT, on a read-only connection or a hot standby too; a missing table
// gives [shardid.ErrSetupRequired] naming it. [MoveShard] checks before it
// creates anything that the mover can give the copy what the source has
// (on PostgreSQL the owners and privileges of the schema, tables,
// sequences and functions, which it copies, with next_id(); on
// MySQL/MariaDB with binary logging, the right to create triggers), and
// refuses with [ErrMoverPrivileges] naming the fix.
//
// The root package shardid keeps the router and its SetMap; this package
// brings the database drivers' dependencies (pgx) that the root does not
// need.
package reshard
