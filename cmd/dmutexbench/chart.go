package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// chartSize is the size of the whole chart: two panels side by side.
var chartWidth, chartHeight = 30 * vg.Centimeter, 12 * vg.Centimeter

// drawChart draws two panels to file, as PNG or SVG by its extension:
// messages per entry (one at a time, plus all N at once where that costs
// another count) against n for every algorithm, and
// the p50 Lock latency against the number of contenders at one size (8
// if measured, else the first).
func drawChart(file string, rows []row, loads []load) error {
	msgs, err := msgsPlot(rows)
	if err != nil {
		return err
	}
	lat, err := latencyPlot(rows)
	if err != nil {
		return err
	}
	var (
		c  vg.CanvasWriterTo
		dc draw.Canvas
	)
	if strings.EqualFold(filepath.Ext(file), ".svg") {
		s := vgsvg.New(chartWidth, chartHeight)
		c, dc = s, draw.New(s)
	} else {
		img := vgimg.New(chartWidth, chartHeight)
		c, dc = vgimg.PngCanvas{Canvas: img}, draw.New(img)
	}
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Centimeter, PadTop: vg.Millimeter * 3,
		PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3}
	canvases := plot.Align([][]*plot.Plot{{msgs, lat}}, tiles, dc)
	msgs.Draw(canvases[0][0])
	lat.Draw(canvases[0][1])
	return writeFile(file, c)
}

func writeFile(file string, c io.WriterTo) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// series groups points by algorithm, keeping the rows' order of
// algorithms.
type series struct {
	names []string
	pts   map[string]plotter.XYs
}

func (s *series) add(name string, x, y float64) {
	if s.pts == nil {
		s.pts = make(map[string]plotter.XYs)
	}
	if _, ok := s.pts[name]; !ok {
		s.names = append(s.names, name)
	}
	s.pts[name] = append(s.pts[name], plotter.XY{X: x, Y: y})
}

// floorLog keeps a value plottable on a log axis: 0 messages (a lone
// peer) is drawn at the axis floor.
func floorLog(y float64) float64 { return math.Max(y, 0.1) }

func msgsPlot(rows []row) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Messages per entry: one at a time, or as noted"
	p.X.Label.Text = "peers N (log scale)"
	p.Y.Label.Text = "messages per entry (log scale)"
	var s series
	for _, r := range rows {
		s.add(r.Algorithm, float64(r.N), floorLog(r.MsgsOne))
	}
	// Where the literature gives another count for all peers asking at
	// once (implicit replies: 1.5(N-1)), the measured one gets a series of
	// its own.
	for _, r := range rows {
		if r.note != "" {
			s.add(r.Algorithm+", all N ask at once", float64(r.N), floorLog(r.MsgsK))
		}
	}
	logAxes(p, s)
	return p, addLines(p, s)
}

// latencySize is the cluster size the latency panel shows when measured.
const latencySize = 8

func latencyPlot(rows []row) (*plot.Plot, error) {
	n := rows[0].N
	for _, r := range rows {
		if r.N == latencySize {
			n = latencySize
		}
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Lock latency against load, N = %d", n)
	p.X.Label.Text = "contending peers (log scale)"
	p.Y.Label.Text = "p50 latency, µs (log scale)"
	var s series
	for _, r := range rows {
		if r.N != n {
			continue
		}
		ls := slices.Clone(r.Loads)
		slices.SortStableFunc(ls, func(a, b latency) int { return a.Contenders - b.Contenders })
		for i, l := range ls {
			if i > 0 && l.Contenders == ls[i-1].Contenders {
				continue
			}
			s.add(r.Algorithm, float64(l.Contenders), math.Max(l.P50, 0.01))
		}
	}
	logAxes(p, s)
	return p, addLines(p, s)
}

// logAxes makes both axes logarithmic, with a tick at every x of the data
// and at 1, 2 and 5 times each power of ten on y.
func logAxes(p *plot.Plot, s series) {
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	var xs []float64
	for _, pts := range s.pts {
		for _, pt := range pts {
			xs = append(xs, pt.X)
		}
	}
	slices.Sort(xs)
	var ticks plot.ConstantTicks
	for _, x := range slices.Compact(xs) {
		ticks = append(ticks, plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'g', -1, 64)})
	}
	p.X.Tick.Marker = ticks
	p.Y.Tick.Marker = ticks125{}
}

// ticks125 labels 1, 2 and 5 times each power of ten in range.
type ticks125 struct{}

func (ticks125) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v >= lo*0.999 && v <= hi*1.001 {
				ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
	}
	return ts
}

// addLines draws each series as a line with points, in a colour, dash and
// glyph of its own, and adds it to the legend at the top left.
func addLines(p *plot.Plot, s series) error {
	for i, name := range s.names {
		l, pts, err := plotter.NewLinePoints(s.pts[name])
		if err != nil {
			return fmt.Errorf("chart: %s: %w", name, err)
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		l.Width = vg.Points(1.5)
		pts.Color = plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(name, l, pts)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Millimeter * 2
	p.Legend.YOffs = -vg.Millimeter * 2
	p.Add(plotter.NewGrid())
	return nil
}
