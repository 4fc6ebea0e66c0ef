/*
 * The pre-tokenizer regexes of the byte-level BPE vocabularies, matched by hand.
 *
 * llama3 (tokenizer.ggml.pre = "llama-bpe"), as in Llama 3's tokenizer.json:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,3}
 *   | ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 * qwen2: the same with \p{N} (single digits) in place of \p{N}{1,3}.
 *
 * A regex engine scans left to right and, at each position, takes the first alternative
 * that matches (each greedy, with backtracking); match_at() below does the same for each
 * alternative in order, working out by hand where backtracking would stop. Every code
 * point matches some alternative, so the pre-tokens tile the text. \s is the Unicode
 * White_Space property, \p{L} and \p{N} the letter and number categories
 * (unicode_table.inc); bytes of invalid UTF-8 count as "other" (neither).
 */
#include <stdlib.h>

#include "tok_internal.h"

typedef struct cps {
    const uint32_t *cp; /* (n) code points */
    const uint8_t *fl;  /* (n) ST_TOK_U_* flags */
    size_t n;
} cps;

static bool is_l(const cps *c, size_t i) { return i < c->n && (c->fl[i] & ST_TOK_U_LETTER); }
static bool is_n(const cps *c, size_t i) { return i < c->n && (c->fl[i] & ST_TOK_U_NUMBER); }
static bool is_ws(const cps *c, size_t i) { return i < c->n && (c->fl[i] & ST_TOK_U_WHITESPACE); }
static bool is_nl(const cps *c, size_t i) { return i < c->n && (c->cp[i] == '\r' || c->cp[i] == '\n'); }
static bool is_other(const cps *c, size_t i) { /* [^\s\p{L}\p{N}] */
    return i < c->n && !(c->fl[i] & (ST_TOK_U_WHITESPACE | ST_TOK_U_LETTER | ST_TOK_U_NUMBER));
}

/* Simple case folding of the letters the contractions use ('ſ', U+017F, folds to 's'). */
static uint32_t fold(const cps *c, size_t i) {
    if (i >= c->n) return 0;
    uint32_t x = c->cp[i];
    if (x >= 'A' && x <= 'Z') return x + 32;
    if (x == 0x17F) return 's';
    return x;
}

/* End (exclusive) of the pre-token that starts at i < c->n. */
static size_t match_at(const cps *c, size_t i, st_tok_pre pre) {
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
    if (c->cp[i] == '\'') {
        uint32_t a = fold(c, i + 1), b = fold(c, i + 2);
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    size_t j = i;
    if (!is_l(c, j) && !is_nl(c, j) && !is_n(c, j) && is_l(c, j + 1)) j++;
    if (is_l(c, j)) {
        while (is_l(c, j)) j++;
        return j;
    }
    /* \p{N}{1,3} (llama3) or \p{N} (qwen2) */
    if (is_n(c, i)) {
        size_t max = pre == ST_TOK_PRE_QWEN2 ? 1 : 3;
        j = i;
        while (j - i < max && is_n(c, j)) j++;
        return j;
    }
    /* ' '?[^\s\p{L}\p{N}]+[\r\n]* */
    j = i;
    if (c->cp[j] == ' ' && is_other(c, j + 1)) j++;
    if (is_other(c, j)) {
        while (is_other(c, j)) j++;
        while (is_nl(c, j)) j++;
        return j;
    }
    /* the whitespace alternatives; end = end of the run of whitespace */
    size_t end = i;
    while (is_ws(c, end)) end++;
    if (end > i) {
        /* \s*[\r\n]+ : up to and including the run's last line break */
        for (size_t k = end; k > i; k--)
            if (is_nl(c, k - 1)) return k;
        /* \s+(?!\S) : the run, less its last character when a non-space follows */
        if (end == c->n) return end;
        if (end - 1 > i) return end - 1;
        /* \s+ */
        return end;
    }
    return i + 1; /* unreachable: every code point is a letter, number, space or other */
}

st_status st_tok_pretokenize(st_tok_pre pre, const char *text, size_t len, st_tok_piece_fn piece, void *ctx,
                             st_error *err) {
    if (len == 0) return ST_OK;
    uint32_t *cp = malloc(len * sizeof(*cp));
    uint8_t *fl = malloc(len);
    size_t *off = malloc((len + 1) * sizeof(*off));
    st_status st = ST_OK;
    if (!cp || !fl || !off) {
        st = st_error_set(err, ST_ERROR_NOMEM, "tokenizer: out of memory for %zu bytes of text", len);
        goto done;
    }
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t k = st_tok_utf8_decode(text + i, len - i, &cp[n]);
        fl[n] = cp[n] == ST_TOK_INVALID_CP ? 0 : (uint8_t)st_tok_unicode_flags(cp[n]);
        off[n++] = i;
        i += k;
    }
    off[n] = len;
    cps c = {cp, fl, n};
    for (size_t i = 0; i < n;) {
        size_t j = match_at(&c, i, pre);
        ST_ASSERT(j > i && j <= n);
        if ((st = piece(ctx, text + off[i], off[j] - off[i], err))) goto done;
        i = j;
    }
done:
    free(cp);
    free(fl);
    free(off);
    return st;
}
