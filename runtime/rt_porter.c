/* NLTK's Porter stemmer, NLTK_EXTENSIONS mode (nltk/stem/porter.py), step by step with the
 * same rule tables and the same "first matching suffix decides" rule. The word lives in one
 * buffer; every step only shortens it or swaps a suffix for one no longer than it (step 1b's
 * +e comes after removing at least two letters), so the buffer never grows. */
#include "runtime/rt_porter.h"

#include <stdbool.h>
#include <string.h>

typedef struct {
    char *s;
    size_t n;
} rt_word;

static bool rt_is_vowel(char c) { return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u'; }

/* A consonant is not a vowel, and 'y' is one only when the letter before it is not (or it
 * starts the word): walk back over the run of y's. */
static bool rt_cons(const char *s, size_t i) {
    if (rt_is_vowel(s[i])) return false;
    if (s[i] != 'y') return true;
    bool negate = false;
    while (i > 0 && s[i] == 'y') {
        negate = !negate;
        i--;
    }
    return (!rt_is_vowel(s[i])) != negate;
}

/* m in [C](VC){m}[V]: the number of vowel-to-consonant transitions. */
static int rt_measure(const char *s, size_t n) {
    int m = 0;
    bool prev_cons = true, prev_set = false;
    for (size_t i = 0; i < n; i++) {
        bool c;
        if (rt_is_vowel(s[i])) c = false;
        else if (s[i] == 'y') c = i == 0 ? true : !prev_cons;
        else c = true;
        if (prev_set && !prev_cons && c) m++;
        prev_cons = c;
        prev_set = true;
    }
    return m;
}

static bool rt_contains_vowel(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!rt_cons(s, i)) return true;
    return false;
}

/* *d */
static bool rt_ends_double_cons(const char *s, size_t n) { return n >= 2 && s[n - 1] == s[n - 2] && rt_cons(s, n - 1); }

/* *o, with NLTK's extension for two-letter stems (vowel then consonant). */
static bool rt_ends_cvc(const char *s, size_t n) {
    if (n >= 3 && rt_cons(s, n - 3) && !rt_cons(s, n - 2) && rt_cons(s, n - 1) && s[n - 1] != 'w' && s[n - 1] != 'x' &&
        s[n - 1] != 'y')
        return true;
    return n == 2 && !rt_cons(s, 0) && rt_cons(s, 1);
}

static bool rt_ends_with(const rt_word *w, const char *suffix) {
    size_t k = strlen(suffix);
    return w->n >= k && memcmp(w->s + w->n - k, suffix, k) == 0;
}

/* Replaces the suffix (known to be there) by repl. */
static void rt_set_suffix(rt_word *w, const char *suffix, const char *repl) {
    size_t k = strlen(suffix), r = strlen(repl);
    memcpy(w->s + w->n - k, repl, r);
    w->n = w->n - k + r;
}

typedef enum {
    RT_COND_NONE,
    RT_COND_M_GT0,       /* measure(stem) > 0 */
    RT_COND_M_GT1,       /* measure(stem) > 1 */
    RT_COND_M_GT1_ST,    /* measure(stem) > 1 and stem ends in s or t (step 4 'ion') */
    RT_COND_LOGI         /* measure(word minus 'ogi') > 0: the l stays with the stem */
} rt_cond;

typedef struct {
    const char *suffix, *repl;
    rt_cond cond;
} rt_rule;

static bool rt_cond_holds(rt_cond c, const char *s, size_t stem_n, size_t word_n) {
    switch (c) {
    case RT_COND_NONE: return true;
    case RT_COND_M_GT0: return rt_measure(s, stem_n) > 0;
    case RT_COND_M_GT1: return rt_measure(s, stem_n) > 1;
    case RT_COND_M_GT1_ST:
        return rt_measure(s, stem_n) > 1 && stem_n > 0 && (s[stem_n - 1] == 's' || s[stem_n - 1] == 't');
    case RT_COND_LOGI: return rt_measure(s, word_n - 3) > 0;
    }
    return false;
}

/* _apply_rule_list: the first rule whose suffix matches decides; if its condition fails the
 * word is left as it is. */
static void rt_apply_rules(rt_word *w, const rt_rule *rules, size_t n_rules) {
    for (size_t i = 0; i < n_rules; i++) {
        if (!rt_ends_with(w, rules[i].suffix)) continue;
        size_t stem_n = w->n - strlen(rules[i].suffix);
        if (rt_cond_holds(rules[i].cond, w->s, stem_n, w->n)) rt_set_suffix(w, rules[i].suffix, rules[i].repl);
        return;
    }
}

static void rt_step1a(rt_word *w) {
    if (rt_ends_with(w, "ies") && w->n == 4) {
        rt_set_suffix(w, "ies", "ie");
        return;
    }
    static const rt_rule rules[] = {
        {"sses", "ss", RT_COND_NONE}, {"ies", "i", RT_COND_NONE}, {"ss", "ss", RT_COND_NONE}, {"s", "", RT_COND_NONE}};
    rt_apply_rules(w, rules, sizeof rules / sizeof *rules);
}

static void rt_step1b(rt_word *w) {
    if (rt_ends_with(w, "ied")) {
        rt_set_suffix(w, "ied", w->n == 4 ? "ie" : "i");
        return;
    }
    if (rt_ends_with(w, "eed")) {
        if (rt_measure(w->s, w->n - 3) > 0) rt_set_suffix(w, "eed", "ee");
        return;
    }
    bool removed = false;
    static const char *const suffixes[] = {"ed", "ing"};
    for (int i = 0; i < 2 && !removed; i++) {
        size_t k = strlen(suffixes[i]);
        if (rt_ends_with(w, suffixes[i]) && rt_contains_vowel(w->s, w->n - k)) {
            w->n -= k;
            removed = true;
        }
    }
    if (!removed) return;
    /* The rule list on the intermediate stem: at/bl/iz get their e back, a double consonant
     * (not l, s or z) loses one letter, and a short cvc stem (m = 1) gets an e. */
    if (rt_ends_with(w, "at") || rt_ends_with(w, "bl") || rt_ends_with(w, "iz")) {
        w->s[w->n++] = 'e';
        return;
    }
    if (rt_ends_double_cons(w->s, w->n)) {
        char last = w->s[w->n - 1];
        if (last != 'l' && last != 's' && last != 'z') w->n--;
        return;
    }
    if (rt_measure(w->s, w->n) == 1 && rt_ends_cvc(w->s, w->n)) w->s[w->n++] = 'e';
}

static void rt_step1c(rt_word *w) {
    /* y -> i when the stem is longer than one letter and ends in a consonant. */
    if (rt_ends_with(w, "y") && w->n - 1 > 1 && rt_cons(w->s, w->n - 2)) w->s[w->n - 1] = 'i';
}

static void rt_step2(rt_word *w) {
    /* NLTK applies alli -> al first and then runs step 2 again on the result. */
    if (rt_ends_with(w, "alli") && rt_measure(w->s, w->n - 4) > 0) {
        rt_set_suffix(w, "alli", "al");
        rt_step2(w);
        return;
    }
    static const rt_rule rules[] = {
        {"ational", "ate", RT_COND_M_GT0}, {"tional", "tion", RT_COND_M_GT0}, {"enci", "ence", RT_COND_M_GT0},
        {"anci", "ance", RT_COND_M_GT0},   {"izer", "ize", RT_COND_M_GT0},    {"bli", "ble", RT_COND_M_GT0},
        {"alli", "al", RT_COND_M_GT0},     {"entli", "ent", RT_COND_M_GT0},   {"eli", "e", RT_COND_M_GT0},
        {"ousli", "ous", RT_COND_M_GT0},   {"ization", "ize", RT_COND_M_GT0}, {"ation", "ate", RT_COND_M_GT0},
        {"ator", "ate", RT_COND_M_GT0},    {"alism", "al", RT_COND_M_GT0},    {"iveness", "ive", RT_COND_M_GT0},
        {"fulness", "ful", RT_COND_M_GT0}, {"ousness", "ous", RT_COND_M_GT0}, {"aliti", "al", RT_COND_M_GT0},
        {"iviti", "ive", RT_COND_M_GT0},   {"biliti", "ble", RT_COND_M_GT0},  {"fulli", "ful", RT_COND_M_GT0},
        {"logi", "log", RT_COND_LOGI}};
    rt_apply_rules(w, rules, sizeof rules / sizeof *rules);
}

static void rt_step3(rt_word *w) {
    static const rt_rule rules[] = {{"icate", "ic", RT_COND_M_GT0}, {"ative", "", RT_COND_M_GT0},
                                    {"alize", "al", RT_COND_M_GT0}, {"iciti", "ic", RT_COND_M_GT0},
                                    {"ical", "ic", RT_COND_M_GT0},  {"ful", "", RT_COND_M_GT0},
                                    {"ness", "", RT_COND_M_GT0}};
    rt_apply_rules(w, rules, sizeof rules / sizeof *rules);
}

static void rt_step4(rt_word *w) {
    static const rt_rule rules[] = {
        {"al", "", RT_COND_M_GT1},   {"ance", "", RT_COND_M_GT1}, {"ence", "", RT_COND_M_GT1},
        {"er", "", RT_COND_M_GT1},   {"ic", "", RT_COND_M_GT1},   {"able", "", RT_COND_M_GT1},
        {"ible", "", RT_COND_M_GT1}, {"ant", "", RT_COND_M_GT1},  {"ement", "", RT_COND_M_GT1},
        {"ment", "", RT_COND_M_GT1}, {"ent", "", RT_COND_M_GT1},  {"ion", "", RT_COND_M_GT1_ST},
        {"ou", "", RT_COND_M_GT1},   {"ism", "", RT_COND_M_GT1},  {"ate", "", RT_COND_M_GT1},
        {"iti", "", RT_COND_M_GT1},  {"ous", "", RT_COND_M_GT1},  {"ive", "", RT_COND_M_GT1},
        {"ize", "", RT_COND_M_GT1}};
    rt_apply_rules(w, rules, sizeof rules / sizeof *rules);
}

static void rt_step5a(rt_word *w) {
    if (!rt_ends_with(w, "e")) return;
    int m = rt_measure(w->s, w->n - 1);
    if (m > 1 || (m == 1 && !rt_ends_cvc(w->s, w->n - 1))) w->n--;
}

static void rt_step5b(rt_word *w) {
    /* ll -> l when measure(word minus one l) > 1 */
    if (rt_ends_with(w, "ll") && rt_measure(w->s, w->n - 1) > 1) w->n--;
}

/* NLTK's table of irregular forms (word -> stem), consulted before any step. */
static const char *const rt_porter_irregular[][2] = {
    {"sky", "sky"},         {"skies", "sky"},         {"dying", "die"},      {"lying", "lie"},
    {"tying", "tie"},       {"news", "news"},         {"innings", "inning"}, {"inning", "inning"},
    {"outings", "outing"},  {"outing", "outing"},     {"cannings", "canning"}, {"canning", "canning"},
    {"howe", "howe"},       {"proceed", "proceed"},   {"exceed", "exceed"},  {"succeed", "succeed"}};

size_t rt_porter_stem(const char *word, size_t len, char *out) {
    rt_word w = {out, len};
    for (size_t i = 0; i < len; i++) out[i] = word[i] >= 'A' && word[i] <= 'Z' ? (char)(word[i] - 'A' + 'a') : word[i];
    for (size_t i = 0; i < sizeof rt_porter_irregular / sizeof *rt_porter_irregular; i++) {
        const char *from = rt_porter_irregular[i][0], *to = rt_porter_irregular[i][1];
        if (strlen(from) == len && memcmp(out, from, len) == 0) {
            w.n = strlen(to);
            memcpy(out, to, w.n);
            out[w.n] = '\0';
            return w.n;
        }
    }
    if (len > 2) {
        rt_step1a(&w);
        rt_step1b(&w);
        rt_step1c(&w);
        rt_step2(&w);
        rt_step3(&w);
        rt_step4(&w);
        rt_step5a(&w);
        rt_step5b(&w);
    }
    out[w.n] = '\0';
    return w.n;
}
