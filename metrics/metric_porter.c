/* NLTK's Porter stemmer, NLTK_EXTENSIONS mode (nltk/stem/porter.py), step by step with the
 * same rule tables and the same "first matching suffix decides" rule. The word lives in one
 * buffer; every step only shortens it or swaps a suffix for one no longer than it (step 1b's
 * +e comes after removing at least two letters), so the buffer never grows. */
#include "metrics/metric_porter.h"

#include <stdbool.h>
#include <string.h>

typedef struct {
    char *s;
    size_t n;
} metric_word;

static bool metric_is_vowel(char c) { return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u'; }

/* A consonant is not a vowel, and 'y' is one only when the letter before it is not (or it
 * starts the word): walk back over the run of y's. */
static bool metric_cons(const char *s, size_t i) {
    if (metric_is_vowel(s[i])) return false;
    if (s[i] != 'y') return true;
    bool negate = false;
    while (i > 0 && s[i] == 'y') {
        negate = !negate;
        i--;
    }
    return (!metric_is_vowel(s[i])) != negate;
}

/* m in [C](VC){m}[V]: the number of vowel-to-consonant transitions. */
static int metric_measure(const char *s, size_t n) {
    int m = 0;
    bool prev_cons = true, prev_set = false;
    for (size_t i = 0; i < n; i++) {
        bool c;
        if (metric_is_vowel(s[i]))
            c = false;
        else if (s[i] == 'y')
            c = i == 0 ? true : !prev_cons;
        else
            c = true;
        if (prev_set && !prev_cons && c) m++;
        prev_cons = c;
        prev_set = true;
    }
    return m;
}

static bool metric_contains_vowel(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!metric_cons(s, i)) return true;
    return false;
}

/* *d */
static bool metric_ends_double_cons(const char *s, size_t n) {
    return n >= 2 && s[n - 1] == s[n - 2] && metric_cons(s, n - 1);
}

/* *o, with NLTK's extension for two-letter stems (vowel then consonant). */
static bool metric_ends_cvc(const char *s, size_t n) {
    if (n >= 3 && metric_cons(s, n - 3) && !metric_cons(s, n - 2) && metric_cons(s, n - 1) && s[n - 1] != 'w' &&
        s[n - 1] != 'x' && s[n - 1] != 'y')
        return true;
    return n == 2 && !metric_cons(s, 0) && metric_cons(s, 1);
}

static bool metric_ends_with(const metric_word *w, const char *suffix) {
    size_t k = strlen(suffix);
    return w->n >= k && memcmp(w->s + w->n - k, suffix, k) == 0;
}

/* Replaces the suffix (known to be there) by repl. */
static void metric_set_suffix(metric_word *w, const char *suffix, const char *repl) {
    size_t k = strlen(suffix), r = strlen(repl);
    memcpy(w->s + w->n - k, repl, r);
    w->n = w->n - k + r;
}

typedef enum {
    METRIC_COND_NONE,
    METRIC_COND_M_GT0,    /* measure(stem) > 0 */
    METRIC_COND_M_GT1,    /* measure(stem) > 1 */
    METRIC_COND_M_GT1_ST, /* measure(stem) > 1 and stem ends in s or t (step 4 'ion') */
    METRIC_COND_LOGI      /* measure(word minus 'ogi') > 0: the l stays with the stem */
} metric_cond;

typedef struct {
    const char *suffix, *repl;
    metric_cond cond;
} metric_rule;

static bool metric_cond_holds(metric_cond c, const char *s, size_t stem_n, size_t word_n) {
    switch (c) {
    case METRIC_COND_NONE: return true;
    case METRIC_COND_M_GT0: return metric_measure(s, stem_n) > 0;
    case METRIC_COND_M_GT1: return metric_measure(s, stem_n) > 1;
    case METRIC_COND_M_GT1_ST:
        return metric_measure(s, stem_n) > 1 && stem_n > 0 && (s[stem_n - 1] == 's' || s[stem_n - 1] == 't');
    case METRIC_COND_LOGI: return metric_measure(s, word_n - 3) > 0;
    }
    return false;
}

/* _apply_rule_list: the first rule whose suffix matches decides; if its condition fails the
 * word is left as it is. */
static void metric_apply_rules(metric_word *w, const metric_rule *rules, size_t n_rules) {
    for (size_t i = 0; i < n_rules; i++) {
        if (!metric_ends_with(w, rules[i].suffix)) continue;
        size_t stem_n = w->n - strlen(rules[i].suffix);
        if (metric_cond_holds(rules[i].cond, w->s, stem_n, w->n)) metric_set_suffix(w, rules[i].suffix, rules[i].repl);
        return;
    }
}

static void metric_step1a(metric_word *w) {
    if (metric_ends_with(w, "ies") && w->n == 4) {
        metric_set_suffix(w, "ies", "ie");
        return;
    }
    static const metric_rule rules[] = {{"sses", "ss", METRIC_COND_NONE},
                                        {"ies", "i", METRIC_COND_NONE},
                                        {"ss", "ss", METRIC_COND_NONE},
                                        {"s", "", METRIC_COND_NONE}};
    metric_apply_rules(w, rules, sizeof rules / sizeof *rules);
}

static void metric_step1b(metric_word *w) {
    if (metric_ends_with(w, "ied")) {
        metric_set_suffix(w, "ied", w->n == 4 ? "ie" : "i");
        return;
    }
    if (metric_ends_with(w, "eed")) {
        if (metric_measure(w->s, w->n - 3) > 0) metric_set_suffix(w, "eed", "ee");
        return;
    }
    bool removed = false;
    static const char *const suffixes[] = {"ed", "ing"};
    for (int i = 0; i < 2 && !removed; i++) {
        size_t k = strlen(suffixes[i]);
        if (metric_ends_with(w, suffixes[i]) && metric_contains_vowel(w->s, w->n - k)) {
            w->n -= k;
            removed = true;
        }
    }
    if (!removed) return;
    /* The rule list on the intermediate stem: at/bl/iz get their e back, a double consonant
     * (not l, s or z) loses one letter, and a short cvc stem (m = 1) gets an e. */
    if (metric_ends_with(w, "at") || metric_ends_with(w, "bl") || metric_ends_with(w, "iz")) {
        w->s[w->n++] = 'e';
        return;
    }
    if (metric_ends_double_cons(w->s, w->n)) {
        char last = w->s[w->n - 1];
        if (last != 'l' && last != 's' && last != 'z') w->n--;
        return;
    }
    if (metric_measure(w->s, w->n) == 1 && metric_ends_cvc(w->s, w->n)) w->s[w->n++] = 'e';
}

static void metric_step1c(metric_word *w) {
    /* y -> i when the stem is longer than one letter and ends in a consonant. */
    if (metric_ends_with(w, "y") && w->n - 1 > 1 && metric_cons(w->s, w->n - 2)) w->s[w->n - 1] = 'i';
}

static void metric_step2(metric_word *w) {
    /* NLTK applies alli -> al first and then runs step 2 again on the result. */
    if (metric_ends_with(w, "alli") && metric_measure(w->s, w->n - 4) > 0) {
        metric_set_suffix(w, "alli", "al");
        metric_step2(w);
        return;
    }
    static const metric_rule rules[] = {{"ational", "ate", METRIC_COND_M_GT0}, {"tional", "tion", METRIC_COND_M_GT0},
                                        {"enci", "ence", METRIC_COND_M_GT0},   {"anci", "ance", METRIC_COND_M_GT0},
                                        {"izer", "ize", METRIC_COND_M_GT0},    {"bli", "ble", METRIC_COND_M_GT0},
                                        {"alli", "al", METRIC_COND_M_GT0},     {"entli", "ent", METRIC_COND_M_GT0},
                                        {"eli", "e", METRIC_COND_M_GT0},       {"ousli", "ous", METRIC_COND_M_GT0},
                                        {"ization", "ize", METRIC_COND_M_GT0}, {"ation", "ate", METRIC_COND_M_GT0},
                                        {"ator", "ate", METRIC_COND_M_GT0},    {"alism", "al", METRIC_COND_M_GT0},
                                        {"iveness", "ive", METRIC_COND_M_GT0}, {"fulness", "ful", METRIC_COND_M_GT0},
                                        {"ousness", "ous", METRIC_COND_M_GT0}, {"aliti", "al", METRIC_COND_M_GT0},
                                        {"iviti", "ive", METRIC_COND_M_GT0},   {"biliti", "ble", METRIC_COND_M_GT0},
                                        {"fulli", "ful", METRIC_COND_M_GT0},   {"logi", "log", METRIC_COND_LOGI}};
    metric_apply_rules(w, rules, sizeof rules / sizeof *rules);
}

static void metric_step3(metric_word *w) {
    static const metric_rule rules[] = {{"icate", "ic", METRIC_COND_M_GT0}, {"ative", "", METRIC_COND_M_GT0},
                                        {"alize", "al", METRIC_COND_M_GT0}, {"iciti", "ic", METRIC_COND_M_GT0},
                                        {"ical", "ic", METRIC_COND_M_GT0},  {"ful", "", METRIC_COND_M_GT0},
                                        {"ness", "", METRIC_COND_M_GT0}};
    metric_apply_rules(w, rules, sizeof rules / sizeof *rules);
}

static void metric_step4(metric_word *w) {
    static const metric_rule rules[] = {
        {"al", "", METRIC_COND_M_GT1},   {"ance", "", METRIC_COND_M_GT1}, {"ence", "", METRIC_COND_M_GT1},
        {"er", "", METRIC_COND_M_GT1},   {"ic", "", METRIC_COND_M_GT1},   {"able", "", METRIC_COND_M_GT1},
        {"ible", "", METRIC_COND_M_GT1}, {"ant", "", METRIC_COND_M_GT1},  {"ement", "", METRIC_COND_M_GT1},
        {"ment", "", METRIC_COND_M_GT1}, {"ent", "", METRIC_COND_M_GT1},  {"ion", "", METRIC_COND_M_GT1_ST},
        {"ou", "", METRIC_COND_M_GT1},   {"ism", "", METRIC_COND_M_GT1},  {"ate", "", METRIC_COND_M_GT1},
        {"iti", "", METRIC_COND_M_GT1},  {"ous", "", METRIC_COND_M_GT1},  {"ive", "", METRIC_COND_M_GT1},
        {"ize", "", METRIC_COND_M_GT1}};
    metric_apply_rules(w, rules, sizeof rules / sizeof *rules);
}

static void metric_step5a(metric_word *w) {
    if (!metric_ends_with(w, "e")) return;
    int m = metric_measure(w->s, w->n - 1);
    if (m > 1 || (m == 1 && !metric_ends_cvc(w->s, w->n - 1))) w->n--;
}

static void metric_step5b(metric_word *w) {
    /* ll -> l when measure(word minus one l) > 1 */
    if (metric_ends_with(w, "ll") && metric_measure(w->s, w->n - 1) > 1) w->n--;
}

/* NLTK's table of irregular forms (word -> stem), consulted before any step. */
static const char *const metric_porter_irregular[][2] = {
    {"sky", "sky"},        {"skies", "sky"},       {"dying", "die"},        {"lying", "lie"},
    {"tying", "tie"},      {"news", "news"},       {"innings", "inning"},   {"inning", "inning"},
    {"outings", "outing"}, {"outing", "outing"},   {"cannings", "canning"}, {"canning", "canning"},
    {"howe", "howe"},      {"proceed", "proceed"}, {"exceed", "exceed"},    {"succeed", "succeed"}};

size_t metric_porter_stem(const char *word, size_t len, char *out) {
    metric_word w = {out, len};
    for (size_t i = 0; i < len; i++) out[i] = word[i] >= 'A' && word[i] <= 'Z' ? (char)(word[i] - 'A' + 'a') : word[i];
    for (size_t i = 0; i < sizeof metric_porter_irregular / sizeof *metric_porter_irregular; i++) {
        const char *from = metric_porter_irregular[i][0], *to = metric_porter_irregular[i][1];
        if (strlen(from) == len && memcmp(out, from, len) == 0) {
            w.n = strlen(to);
            memcpy(out, to, w.n);
            out[w.n] = '\0';
            return w.n;
        }
    }
    if (len > 2) {
        metric_step1a(&w);
        metric_step1b(&w);
        metric_step1c(&w);
        metric_step2(&w);
        metric_step3(&w);
        metric_step4(&w);
        metric_step5a(&w);
        metric_step5b(&w);
    }
    out[w.n] = '\0';
    return w.n;
}
