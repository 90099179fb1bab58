package shardid_test

import (
	"fmt"
	"log"
	"time"

	"github.com/shardid/shardid"
)

func ExampleGenerator_Stats() {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	g, err := shardid.NewGenerator(shardid.Instagram, shardid.WithClock(func() time.Time { return now }))
	if err != nil {
		log.Fatal(err)
	}
	for range 10 {
		if _, err := g.Next(5); err != nil {
			log.Fatal(err)
		}
	}
	now = now.Add(-200 * time.Millisecond) // the clock steps back: tolerated up to 1s
	if _, err := g.Next(5); err != nil {
		log.Fatal(err)
	}
	now = now.Add(-time.Hour)
	_, err = g.Next(5)
	fmt.Println(err != nil)

	s := g.Stats()
	fmt.Printf("issued %d; clock behind %d times, by up to %v; errors: %d clock backwards\n",
		s.Issued, s.ClockBehind, s.MaxClockBehind, s.Errors.ClockBackwards)
	// Output:
	// true
	// issued 11; clock behind 2 times, by up to 1h0m0.2s; errors: 1 clock backwards
}
