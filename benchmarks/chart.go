package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// palette: one colour per lock, fairlock first.
var palette = []string{"#1f77b4", "#17becf", "#d62728", "#ff9896", "#2ca02c", "#98df8a", "#9467bd", "#c5b0d5", "#8c564b", "#e377c2"}

// series is one lock's line in a panel.
type series struct {
	name   string
	colour string
	dashed bool
	points [][2]float64 // contenders, value
}

// renderChart draws throughput and hand-over p50 against the number of
// contenders for every lock, on log scales, as a self-contained SVG.
func renderChart(res *results) string {
	var thr, hand []series
	for i, k := range res.Kinds {
		s := series{name: k.Name, colour: palette[i%len(palette)], dashed: !k.Fairlock}
		h := s
		for _, n := range res.Settings.Contenders {
			rounds := res.Contended[k.Name][n]
			if len(rounds) == 0 {
				continue
			}
			if t := spreadBy(rounds, func(c contendedRound) float64 { return c.Throughput }); t.med > 0 {
				s.points = append(s.points, [2]float64{float64(n), t.med})
			}
			if n > 1 {
				if p := durSpread(rounds, func(c contendedRound) time.Duration { return c.Handover.P50 }); p.med > 0 {
					h.points = append(h.points, [2]float64{float64(n), p.med / 1e3})
				}
			}
		}
		thr, hand = append(thr, s), append(hand, h)
	}
	const w, h = 1000, 470
	var b strings.Builder
	svgStart(&b, w, h)
	fmt.Fprintf(&b, `<text x="%d" y="20" text-anchor="middle" font-size="14">One lock, N contenders each with its own client (Redis %s, %d cores, %s; medians over %d rounds)</text>`+"\n",
		w/2, res.Meta.Redis, res.Meta.Cores, res.Meta.Date.Format("2006-01-02"), res.Settings.Rounds)
	rtt := durSpread(res.Ping, func(p pingRound) time.Duration { return p.RTT.P50 }).med / 1e3
	panel(&b, 70, 50, 380, 300, "acquisitions per second", 0, thr, res.Settings.Contenders)
	panel(&b, 570, 50, 380, 300, "hand-over p50 (µs, Unlock return to next Lock return)", rtt, hand, res.Settings.Contenders)
	// Legend.
	for i, s := range thr {
		x, y := 70+(i%4)*230, 400+(i/4)*22
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="6 3"`
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"%s/><circle cx="%d" cy="%d" r="3" fill="%s"/>`, x, y, x+30, y, s.colour, dash, x+15, y, s.colour)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", x+38, y+4, escape(s.name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// svgStart opens a w x h SVG document on a white background.
func svgStart(b *strings.Builder, w, h int) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
}

// panel draws one log-log panel at (x0, y0) of size pw x ph, with a dotted
// line at rtt (PING round trip, µs) when it is not 0.
func panel(b *strings.Builder, x0, y0, pw, ph int, title string, rtt float64, lines []series, contenders []int) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range lines {
		for _, p := range s.points {
			lo, hi = math.Min(lo, p[1]), math.Max(hi, p[1])
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	if rtt > 0 {
		lo = math.Min(lo, rtt)
	}
	ylo, yhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if ylo == yhi {
		yhi++
	}
	xlo, xhi := math.Log2(float64(contenders[0])), math.Log2(float64(contenders[len(contenders)-1]))
	if xlo == xhi {
		xhi++
	}
	px := func(n float64) float64 { return float64(x0) + (math.Log2(n)-xlo)/(xhi-xlo)*float64(pw) }
	py := func(v float64) float64 { return float64(y0+ph) - (math.Log10(v)-ylo)/(yhi-ylo)*float64(ph) }
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" font-size="13">%s</text>`+"\n", x0+pw/2, y0-8, escape(title))
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>`+"\n", x0, y0, pw, ph)
	for e := ylo; e <= yhi; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if math.Log10(v) > yhi+1e-9 {
				break
			}
			y := py(v)
			stroke := "#eee"
			if m == 1 {
				stroke = "#ccc"
			}
			fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`, x0, y, x0+pw, y, stroke)
			fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#333">%s</text>`+"\n", x0-5, y+4, tick(v))
		}
	}
	for _, n := range contenders {
		x := px(float64(n))
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`, x, y0, x, y0+ph)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#333">%d</text>`+"\n", x, y0+ph+16, n)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">contenders</text>`+"\n", x0+pw/2, y0+ph+34)
	if rtt > 0 && math.Log10(rtt) >= ylo && math.Log10(rtt) <= yhi {
		y := py(rtt)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#000" stroke-dasharray="2 3"/>`, x0, y, x0+pw, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" font-size="11" fill="#333">1 PING round trip (%s)</text>`+"\n", x0+6, y+13, fmtDur(rtt*1e3))
	}
	for _, s := range lines {
		if len(s.points) == 0 {
			continue
		}
		var pts []string
		for _, p := range s.points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p[0]), py(p[1])))
		}
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="6 3"`
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), s.colour, dash)
		for _, p := range s.points {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %d contenders, %s</title></circle>`, px(p[0]), py(p[1]), s.colour, escape(s.name), int(p[0]), tick(p[1]))
		}
		b.WriteString("\n")
	}
}

// tick formats an axis value: 1, 20, 500, 1k, 20k, 1M.
func tick(v float64) string {
	switch {
	case v >= 1e6:
		return trim(v/1e6) + "M"
	case v >= 1e3:
		return trim(v/1e3) + "k"
	default:
		return trim(v)
	}
}

func trim(v float64) string {
	s := fmt.Sprintf("%.1f", v)
	return strings.TrimSuffix(s, ".0")
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
