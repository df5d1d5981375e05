package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The chart is two panels side by side and, right of them, one legend
// for both, so that no legend covers a line.
var (
	chartWidth, chartHeight = 36 * vg.Centimeter, 13 * vg.Centimeter
	legendWidth             = 8 * vg.Centimeter
)

// drawChart draws two panels to file, as PNG or SVG by its extension:
// messages per entry (one at a time, plus all N at once where that costs
// another count) against n for every algorithm, and the p50 Lock latency
// of the entries that had to coordinate against the number of
// contenders at one size (8 if measured, else the first). Every series
// has a colour, a dash and a marker of its own, the same in both panels.
func drawChart(file string, rows []row, loads []load) error {
	st := newStyles()
	msgs, err := msgsPlot(rows, st)
	if err != nil {
		return err
	}
	lat, notes, err := latencyPlot(rows, st)
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
	plots, legend := dc, dc
	plots.Max.X = dc.Max.X - legendWidth
	legend.Min.X = plots.Max.X + vg.Millimeter*4
	legend.Max.Y -= vg.Millimeter * 8
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Centimeter, PadTop: vg.Millimeter * 3,
		PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3}
	canvases := plot.Align([][]*plot.Plot{{msgs, lat}}, tiles, plots)
	msgs.Draw(canvases[0][0])
	lat.Draw(canvases[0][1])
	st.legend.Draw(legend)
	// The notes go under the legend: as an axis label they would be wider
	// than their panel, and plot.Align would narrow the panel to fit them.
	sty := st.legend.TextStyle
	y := st.legend.Rectangle(legend).Min.Y - sty.Font.Size
	for _, line := range notes {
		y -= sty.Font.Size * 1.3
		legend.FillText(sty, vg.Point{X: legend.Min.X, Y: y}, line)
	}
	return writeFile(file, c)
}

// styles gives each series name a colour, a dash pattern and a marker of
// its own, in the order the names are first seen, and keeps one legend
// entry per name.
type styles struct {
	index  map[string]int
	legend plot.Legend
}

func newStyles() *styles {
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	l.TextStyle.Font.Size = vg.Points(10)
	return &styles{index: make(map[string]int), legend: l}
}

// palette holds ten colours that stay apart on white and for the common
// kinds of colour blindness (Tableau 10).
var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xff, 0x7f, 0x0e, 0xff},
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, color.RGBA{0xd6, 0x27, 0x28, 0xff},
	color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	color.RGBA{0xe3, 0x77, 0xc2, 0xff}, color.RGBA{0x7f, 0x7f, 0x7f, 0xff},
	color.RGBA{0xbc, 0xbd, 0x22, 0xff}, color.RGBA{0x17, 0xbe, 0xcf, 0xff},
}

// shapes holds ten markers, hollow and filled, none the same. The fourth
// series, plain Ricart-Agrawala, gets a large ring, so that the fifth, its
// implicit-reply variant, whose one-at-a-time counts are the same, shows
// as a filled triangle inside it.
var shapes = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.TriangleGlyph{}, draw.SquareGlyph{}, draw.RingGlyph{}, draw.PyramidGlyph{},
	draw.BoxGlyph{}, draw.CrossGlyph{}, diamondGlyph{}, draw.PlusGlyph{}, diamondGlyph{filled: true},
}

// dashes holds the line patterns of the ten series. Plain Ricart-Agrawala
// is solid and wide under its variant's dashes.
var dashes = [][]vg.Length{
	nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}, nil, {vg.Points(4), vg.Points(3)},
	{vg.Points(8), vg.Points(2), vg.Points(2), vg.Points(2)}, {vg.Points(1), vg.Points(3)}, nil,
	{vg.Points(10), vg.Points(4)}, {vg.Points(3), vg.Points(1)},
}

// A seriesStyle is how one series is drawn.
type seriesStyle struct {
	color  color.Color
	shape  draw.GlyphDrawer
	radius vg.Length
	dashes []vg.Length
	width  vg.Length
}

// styleAt returns the style of the i-th series.
func styleAt(i int) seriesStyle {
	s := seriesStyle{
		color:  palette[i%len(palette)],
		shape:  shapes[i%len(shapes)],
		radius: vg.Points(3.5),
		dashes: dashes[i%len(dashes)],
		width:  vg.Points(1.5),
	}
	if s.shape == (draw.RingGlyph{}) {
		s.radius, s.width = vg.Points(6), vg.Points(3.5) // around what may sit on it
	}
	return s
}

// indexOf returns name's series number, and whether it is new.
func (st *styles) indexOf(name string) (int, bool) {
	i, ok := st.index[name]
	if !ok {
		i = len(st.index)
		st.index[name] = i
	}
	return i, !ok
}

// add draws pts as series name on p, in name's style.
func (st *styles) add(p *plot.Plot, name string, pts plotter.XYs) error {
	i, isNew := st.indexOf(name)
	l, sc, err := plotter.NewLinePoints(pts)
	if err != nil {
		return fmt.Errorf("chart: %s: %w", name, err)
	}
	s := styleAt(i)
	l.Color, l.Dashes, l.Width = s.color, s.dashes, s.width
	sc.Color, sc.Shape, sc.Radius = s.color, s.shape, s.radius
	p.Add(l, sc)
	if isNew {
		st.legend.Add(name, l, sc)
	}
	return nil
}

// diamondGlyph draws a diamond, hollow or filled.
type diamondGlyph struct{ filled bool }

func (g diamondGlyph) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	r := sty.Radius * 1.3
	var p vg.Path
	p.Move(vg.Point{X: pt.X, Y: pt.Y + r})
	p.Line(vg.Point{X: pt.X + r, Y: pt.Y})
	p.Line(vg.Point{X: pt.X, Y: pt.Y - r})
	p.Line(vg.Point{X: pt.X - r, Y: pt.Y})
	p.Close()
	if g.filled {
		c.Fill(p)
		return
	}
	c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: vg.Points(0.8)})
	c.Stroke(p)
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

func msgsPlot(rows []row, st *styles) (*plot.Plot, error) {
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
	return p, addLines(p, s, st)
}

// latencySize is the cluster size the latency panel shows when measured.
const latencySize = 8

// latencyPlot draws the p50 latency of the entries that had to
// coordinate. Local entries (a token holder entering again with its idle
// token, the coordinator entering while the lock is free) take a fraction
// of a microsecond and would pull an algorithm's median down to them;
// they are left out, and the notes it returns give each algorithm's
// largest share of them over the loads.
func latencyPlot(rows []row, st *styles) (p *plot.Plot, notes []string, err error) {
	n := rows[0].N
	for _, r := range rows {
		if r.N == latencySize {
			n = latencySize
		}
	}
	p = plot.New()
	p.Title.Text = fmt.Sprintf("Lock latency against load, N = %d:\nentries that exchanged messages", n)
	p.X.Label.Text = "contending peers (log scale)"
	p.Y.Label.Text = "p50 latency, µs (log scale)"
	var s series
	var local []string
	for _, r := range rows {
		if r.N != n {
			continue
		}
		ls := slices.Clone(r.Loads)
		slices.SortStableFunc(ls, func(a, b latency) int { return a.Contenders - b.Contenders })
		most := -1
		for i, l := range ls {
			if (i > 0 && l.Contenders == ls[i-1].Contenders) || l.P50Sent == 0 {
				continue
			}
			s.add(r.Algorithm, float64(l.Contenders), math.Max(l.P50Sent, 0.01))
			if most < 0 || l.Local > ls[most].Local {
				most = i
			}
		}
		if most >= 0 && ls[most].Local >= 0.01 {
			local = append(local, fmt.Sprintf("  %s: %.0f%% with %d contending", r.Algorithm, 100*ls[most].Local, ls[most].Contenders))
		}
	}
	if len(local) > 0 {
		notes = append([]string{"Latency panel, left out: local re-entries,", "which exchange no message (an idle token",
			"holder, the coordinator itself); their", "largest share of the entries:"}, local...)
	}
	logAxes(p, s)
	return p, notes, addLines(p, s, st)
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

// addLines draws each series of s on p in its style.
func addLines(p *plot.Plot, s series, st *styles) error {
	for _, name := range s.names {
		if err := st.add(p, name, s.pts[name]); err != nil {
			return err
		}
	}
	p.Add(plotter.NewGrid())
	return nil
}
