/* stride bench --chart: the on-vs-off table as an SVG bar chart, in plain C. One group of
 * bars per row of the table (shape), one bar per model in a fixed colour, a whisker of
 * ± sd, the value on every bar, a zero line, gridlines at round percentages, axis labels
 * and a legend. Every bar is a <rect class="bar"> with data-shape, data-model, data-value
 * and data-sd attributes (and a <title> tooltip), so that a script can read the chart back. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "stride/file_io.h"

/* Tableau 10: distinguishable, and the usual default of plotting tools */
static const char *const PALETTE[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                      "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
#define N_PALETTE (sizeof(PALETTE) / sizeof(PALETTE[0]))

enum {
    BAR_W = 18,      /* px per bar */
    GROUP_GAP = 18,  /* px between two shapes */
    PLOT_H = 320,    /* px of the value axis */
    MARGIN_L = 80,   /* y tick labels and the axis title */
    MARGIN_R = 24,
    TITLE_H = 62,    /* title and two lines of legend text; the legend rows follow */
    LEGEND_ROW_H = 18,
    MARGIN_B = 110,  /* rotated shape labels and the axis title */
    MIN_PLOT_W = 560,
};

static void xml_text(FILE *out, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        default: fputc(*s, out);
        }
    }
}

/* A round tick step (1, 2, 2.5 or 5 times a power of ten) giving about `n` ticks. */
static double nice_step(double range, int n) {
    const double raw = range / n, mag = pow(10.0, floor(log10(raw)));
    static const double steps[] = {1.0, 2.0, 2.5, 5.0, 10.0};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
        if (steps[i] * mag >= raw) return steps[i] * mag;
    return 10.0 * mag;
}

typedef struct chart_axis {
    double lo, hi; /* percent at the bottom and top of the plot */
    double step;
    int top;       /* px of the plot's top edge */
} chart_axis;

static double y_of(const chart_axis *a, double v) { return a->top + (a->hi - v) / (a->hi - a->lo) * PLOT_H; }

/* Width of a legend entry: the swatch, the name (about 7 px a character at 11 px), a gap. */
static int legend_w(const char *name) { return 16 + 7 * (int)strlen(name) + 18; }

st_status bench_chart_svg(const char *path, const bench_results *r, st_error *err) {
    const int n_rows = r->n_tests * r->n_batches * r->n_ubatches, n_cells = n_rows * r->n_models;
    bench_cell *cells = calloc((size_t)n_cells, sizeof(bench_cell));
    double *pct = calloc((size_t)r->reps, sizeof(double));
    st_atomic_file *file = NULL;
    FILE *out = NULL;
    st_status st = ST_OK;
    if (!cells || !pct) {
        st = st_error_set(err, ST_ERROR_NOMEM, "out of memory for a chart of %d bars", n_cells);
        goto done;
    }
    /* cells in row order: (test, -b, -ub), then model */
    double lo = 0.0, hi = 0.0;
    for (int it = 0, k = 0; it < r->n_tests; it++)
        for (int ib = 0; ib < r->n_batches; ib++)
            for (int iu = 0; iu < r->n_ubatches; iu++)
                for (int im = 0; im < r->n_models; im++, k++) {
                    if (!bench_cell_on_off(r, im, it, ib, iu, &cells[k], pct)) {
                        cells[k].ip_a = -1; /* skipped for this model: no bar */
                        continue;
                    }
                    lo = fmin(lo, cells[k].mean - cells[k].sd);
                    hi = fmax(hi, cells[k].mean + cells[k].sd);
                }
    /* room for the value labels beyond the whiskers, and a readable scale when all is ~0 */
    const double span = fmax(hi - lo, 2.0);
    chart_axis ax = {lo - (lo < 0 ? 0.22 * span : 0.0), hi + (hi > 0 ? 0.22 * span : 0.0), 0.0, 0};
    if (ax.hi - ax.lo < 2.0) {
        ax.lo = fmin(ax.lo, -1.0);
        ax.hi = fmax(ax.hi, 1.0);
    }
    ax.step = nice_step(ax.hi - ax.lo, 6);
    ax.lo = floor(ax.lo / ax.step) * ax.step;
    ax.hi = ceil(ax.hi / ax.step) * ax.step;

    const int group_w = r->n_models * BAR_W + GROUP_GAP;
    const int plot_w = n_rows * group_w > MIN_PLOT_W ? n_rows * group_w : MIN_PLOT_W;
    int legend_rows = 1;
    for (int im = 0, x = 0; im < r->n_models; im++) {
        const int w = legend_w(cli_base_name(r->models[im]));
        if (x > 0 && x + w > plot_w) {
            legend_rows++;
            x = 0;
        }
        x += w;
    }
    ax.top = TITLE_H + legend_rows * LEGEND_ROW_H + 16;
    const int width = MARGIN_L + plot_w + MARGIN_R, height = ax.top + PLOT_H + MARGIN_B;
    const double x0 = MARGIN_L + (plot_w - n_rows * group_w) / 2.0;

    if ((st = st_atomic_file_open(path, &file, err)) != ST_OK) goto done;
    out = st_atomic_file_stream(file);
    fprintf(out,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\" font-size=\"11\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            width, height, width, height);
    fprintf(out, "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">padding on vs off: ", MARGIN_L);
    xml_text(out, r->device.name);
    fprintf(out,
            "</text>\n<text x=\"%d\" y=\"37\" fill=\"#555\">mean \xc2\xb1 sd over %d paired repetitions of "
            "(t/s on / t/s off \xe2\x88\x92 1),</text>\n<text x=\"%d\" y=\"52\" fill=\"#555\">for TTFT of "
            "(ms off / ms on \xe2\x88\x92 1): positive = padding on is faster</text>\n",
            MARGIN_L, r->reps, MARGIN_L);
    /* legend */
    for (int im = 0, x = 0, y = TITLE_H; im < r->n_models; im++) {
        const char *name = cli_base_name(r->models[im]);
        if (x > 0 && x + legend_w(name) > plot_w) {
            x = 0;
            y += LEGEND_ROW_H;
        }
        fprintf(out, "<g class=\"legend\"><rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>",
                MARGIN_L + x, y, PALETTE[im % N_PALETTE]);
        fprintf(out, "<text x=\"%d\" y=\"%d\">", MARGIN_L + x + 16, y + 10);
        xml_text(out, name);
        fprintf(out, "</text></g>\n");
        x += legend_w(name);
    }
    /* gridlines and tick labels */
    const int n_ticks = (int)lround((ax.hi - ax.lo) / ax.step);
    for (int i = 0; i <= n_ticks; i++) {
        const double v = ax.lo + i * ax.step, y = y_of(&ax, v), tick = fabs(v) < ax.step * 1e-6 ? 0.0 : v;
        fprintf(out, "<line class=\"grid\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n",
                MARGIN_L, MARGIN_L + plot_w, y, y);
        fprintf(out, tick == 0.0 ? "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g%%</text>\n"
                                  : "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%+g%%</text>\n",
                MARGIN_L - 6, y + 4, tick);
    }
    fprintf(out, "<line class=\"axis\" x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", MARGIN_L,
            MARGIN_L, ax.top, ax.top + PLOT_H);
    fprintf(out,
            "<text class=\"axis-label\" transform=\"translate(18,%d) rotate(-90)\" text-anchor=\"middle\">"
            "speedup, on vs off (%%)</text>\n",
            ax.top + PLOT_H / 2);
    fprintf(out, "<text class=\"axis-label\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">shape</text>\n",
            MARGIN_L + plot_w / 2, height - 8);
    /* bars, whiskers, values, shape labels */
    const double y0 = y_of(&ax, 0.0);
    for (int row = 0, k = 0; row < n_rows; row++) {
        const int iu = row % r->n_ubatches, ib = (row / r->n_ubatches) % r->n_batches,
                  it = row / (r->n_ubatches * r->n_batches);
        char shape[96];
        bench_row_name(r, it, ib, iu, shape, sizeof(shape));
        const double gx = x0 + row * group_w + GROUP_GAP / 2.0;
        for (int im = 0; im < r->n_models; im++, k++) {
            const bench_cell *c = &cells[k];
            if (c->ip_a < 0) continue;
            const double x = gx + im * BAR_W, yv = y_of(&ax, c->mean), cx = x + BAR_W / 2.0;
            const double h = fmax(fabs(yv - y0), 0.5), top = c->mean >= 0 ? y0 - h : y0; /* from the zero line */
            fprintf(out, "<rect class=\"bar\" data-shape=\"");
            xml_text(out, shape);
            fprintf(out, "\" data-model=\"");
            xml_text(out, cli_base_name(r->models[im]));
            fprintf(out, "\" data-value=\"%.4f\" data-sd=\"%.4f\" x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" "
                         "fill=\"%s\"><title>",
                    c->mean, c->sd, x + 1, top, BAR_W - 2, h, PALETTE[im % N_PALETTE]);
            xml_text(out, cli_base_name(r->models[im]));
            fprintf(out, " ");
            xml_text(out, shape);
            fprintf(out, ": %+.1f%% \xc2\xb1 %.1f</title></rect>\n", c->mean, c->sd);
            const double w_lo = y_of(&ax, c->mean - c->sd), w_hi = y_of(&ax, c->mean + c->sd);
            if (c->sd > 0)
                fprintf(out, "<line class=\"whisker\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#222\"/>\n",
                        cx, cx, w_hi, w_lo);
            /* the value, rotated along the bar, beyond the whisker */
            const bool up = c->mean >= 0;
            fprintf(out,
                    "<text class=\"value\" transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"%s\" "
                    "font-size=\"9\">%+.1f</text>\n",
                    cx + 3, up ? fmin(w_hi, yv) - 3 : fmax(w_lo, yv) + 3, up ? "start" : "end", c->mean);
        }
        fprintf(out, "<text class=\"shape\" transform=\"translate(%.1f,%.1f) rotate(-40)\" text-anchor=\"end\">",
                gx + r->n_models * BAR_W / 2.0, (double)(ax.top + PLOT_H + 14));
        xml_text(out, shape);
        fprintf(out, "</text>\n");
    }
    fprintf(out, "<line class=\"zero\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" "
                 "stroke-width=\"1.2\"/>\n</svg>\n",
            MARGIN_L, MARGIN_L + plot_w, y0, y0);
    st = st_atomic_file_commit(file, err);
    file = NULL;
done:
    if (file) st_atomic_file_abort(file);
    free(cells);
    free(pct);
    return st;
}
