/* The Porter stemmer exactly as NLTK's PorterStemmer() in its default NLTK_EXTENSIONS mode,
 * which is what rouge_score uses with use_stemmer=True: Porter's 1980 steps with Martin
 * Porter's later fixes and NLTK's own (the table of irregular forms such as dying -> die,
 * 'ies'/'ied' on four-letter words, y -> i only after a consonant, 'alli' and 'logi' rules),
 * and words of one or two letters left as they are. */
#ifndef METRIC_PORTER_H
#define METRIC_PORTER_H

#include <stddef.h>

/* Stems word[0..len) (ASCII; upper case is lowered first, as stem() does; other bytes count
 * as consonants) into out, which must hold len + 1 bytes: a stem is never longer than its
 * word. Returns the stem's length; out is NUL-terminated. */
size_t metric_porter_stem(const char *word, size_t len, char *out);

#endif
