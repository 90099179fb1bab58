package redislease

import "errors"

// These errors can be returned by the methods of a Store.
var (
	// ErrCorruptLast is returned by Claim and Renew when a worker id's
	// last-unit key (prefix:last:N) holds anything but a canonical decimal
	// int64, which the Store itself never writes: a value set by hand or by
	// another tool, such as "1.5e+16". Nothing is changed, and the worker id
	// cannot be claimed or renewed until the key holds the last time unit
	// its holders may have used: a floor guessed from it could repeat IDs.
	ErrCorruptLast = errors.New("shardid: lease store's last unit is not a decimal int64")
)
