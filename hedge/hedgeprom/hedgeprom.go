// Package hedgeprom exports the counters of a hedge.Policy as Prometheus
// metrics. It lives apart from package hedge so that hedge depends on the
// standard library only.
//
//	p := hedge.NewPolicy()
//	prometheus.MustRegister(hedgeprom.NewCollector(p, prometheus.Labels{"backend": "users"}))
//
// The metrics, all prefixed "hedge_", are:
//
//	requests_total          real requests (counter)
//	hedges_total            extra attempts sent (counter)
//	hedges_won_total        requests answered by an extra attempt (counter)
//	denied_total{reason}    hedges not sent, by hedge.Reason (counter)
//	in_flight               extra attempts running now (gauge)
//	delay_seconds           current hedge delay (gauge)
//	paused{reason}          1 for the reason hedging is paused now, such as
//	                        overload-queueing or low-win-rate (gauge)
//	extra_load_ratio        hedges_total / requests_total (gauge)
package hedgeprom

import (
	"github.com/gosleuth/gosleuth/hedge"
	"github.com/prometheus/client_golang/prometheus"
)

// pauseReasons are the reasons that can pause hedging as a whole.
var pauseReasons = []hedge.Reason{
	hedge.ReasonErrors, hedge.ReasonRejections, hedge.ReasonQueueing, hedge.ReasonPushback, hedge.ReasonLowWinRate,
}

// Collector is a prometheus.Collector for one hedge.Policy. Each scrape
// takes one Policy.Stats snapshot.
type Collector struct {
	p *hedge.Policy

	requests, hedges, won, denied, inFlight, delay, paused, extra, resent *prometheus.Desc
}

// NewCollector returns a Collector for p; constLabels (which may be nil)
// are added to every metric, to tell several policies apart.
func NewCollector(p *hedge.Policy, constLabels prometheus.Labels) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("hedge", "", name), help, labels, constLabels)
	}
	return &Collector{
		p:        p,
		requests: d("requests_total", "Real requests seen by the hedging policy."),
		hedges:   d("hedges_total", "Extra attempts (hedges) sent."),
		won:      d("hedges_won_total", "Requests answered by an extra attempt."),
		denied:   d("denied_total", "Hedges not sent, by reason.", "reason"),
		inFlight: d("in_flight", "Extra attempts running now."),
		delay:    d("delay_seconds", "Current delay before a hedge is sent."),
		paused:   d("paused", "1 for the reason hedging is paused now, 0 for the others.", "reason"),
		extra:    d("extra_load_ratio", "Extra attempts sent per real request since the policy was created."),
		resent:   d("resent_total", "Attempts sent again after net/http failed them with a cancellation that was not theirs."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.hedges, c.won, c.denied, c.inFlight, c.delay, c.paused, c.extra, c.resent} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.p.Stats()
	ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(s.Requests))
	ch <- prometheus.MustNewConstMetric(c.hedges, prometheus.CounterValue, float64(s.Hedges))
	ch <- prometheus.MustNewConstMetric(c.won, prometheus.CounterValue, float64(s.HedgesWon))
	for _, r := range hedge.Reasons() {
		ch <- prometheus.MustNewConstMetric(c.denied, prometheus.CounterValue, float64(s.Denied[r]), r.String())
	}
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(s.InFlight))
	ch <- prometheus.MustNewConstMetric(c.delay, prometheus.GaugeValue, s.Delay.Seconds())
	for _, r := range pauseReasons {
		v := 0.0
		if s.Paused == r {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, v, r.String())
	}
	ch <- prometheus.MustNewConstMetric(c.extra, prometheus.GaugeValue, s.ExtraLoad)
	ch <- prometheus.MustNewConstMetric(c.resent, prometheus.CounterValue, float64(s.Resent))
}
