package shardidprom_test

import (
	"bufio"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardidprom"
)

func ExampleCollector() {
	layout, _ := shardid.Instagram.WithWorkerBits(4)
	g, err := shardid.NewGenerator(layout, shardid.WithWorker(9))
	if err != nil {
		log.Fatal(err)
	}
	c := shardidprom.NewCollector()
	if err := c.AddGenerator("ids", g); err != nil { // AddLease, AddRouter, AddSegments, AddTickets alike
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})) // or http.Handle("/metrics", ...)
	defer srv.Close()

	for range 3 {
		if _, err := g.Next(7); err != nil {
			log.Fatal(err)
		}
	}
	resp, err := http.Get(srv.URL) // what curl localhost:9464/metrics shows
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), "shardid_ids_issued_total") || strings.HasPrefix(lines.Text(), "shardid_generator_worker") {
			fmt.Println(lines.Text())
		}
	}
	// Output:
	// shardid_generator_worker{generator="ids"} 9
	// shardid_ids_issued_total{generator="ids"} 3
}
