package shardid

import "context"

// RenewLease runs one renewal of l now, as its background loop does.
func RenewLease(ctx context.Context, l *Lease) error { return l.renew(ctx) }
