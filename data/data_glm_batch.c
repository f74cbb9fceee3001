/* GLM's collator (see data_glm_batch.h). */
#include "data/data_glm_batch.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_status.h"

void data_glm_batch_free(data_glm_batch *b) {
    free(b->ids);
    free(b->pos);
    free(b->block_pos);
    free(b->labels);
    free(b->sep);
    free(b->cloze_at);
    free(b->cand);
    free(b->label);
    memset(b, 0, sizeof *b);
}

/* Room for B rows of T tokens (the candidates: up to the 16 verbalizer tokens a row). */
static void glm_batch_reserve(data_glm_batch *b, int B, int T) {
    const size_t cells = (size_t)B * T, rows = (size_t)B;
    if (cells <= b->cap_cells && rows <= b->cap_rows) return;
    data_glm_batch_free(b);
    b->cap_cells = cells;
    b->cap_rows = rows;
    b->ids = rt_xmalloc(cells * sizeof(int32_t));
    b->pos = rt_xmalloc(cells * sizeof(int32_t));
    b->block_pos = rt_xmalloc(cells * sizeof(int32_t));
    b->labels = rt_xmalloc(cells * sizeof(int32_t));
    b->sep = rt_xmalloc(rows * sizeof(int32_t));
    b->cloze_at = rt_xmalloc(rows * sizeof(int32_t));
    b->label = rt_xmalloc(rows * sizeof(int32_t));
    b->cand = rt_xmalloc(rows * 16 * sizeof(int32_t));
}

void data_glm_collate(const data_glm_rows *R, const int32_t *ex, int n, int32_t pad_id, const data_pad *pad,
                      data_glm_batch *b) {
    const int per = R->rows_per_example, B = n * per;
    int T = 1;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < per; k++) {
            int len = R->rows[R->first_row[ex[i]] + k].len;
            T = len > T ? len : T;
        }
    T = data_pad_length(pad, T);
    glm_batch_reserve(b, B, T);
    b->B = B;
    b->T = T;
    for (int i = 0; i < n; i++) {
        b->label[i] = R->label[ex[i]];
        for (int k = 0; k < per; k++) {
            const data_glm_row *row = &R->rows[R->first_row[ex[i]] + k];
            int r = i * per + k;
            for (int t = 0; t < T; t++) {
                size_t c = (size_t)r * T + t;
                bool real = t < row->len;
                b->ids[c] = real ? row->ids[t] : pad_id;
                b->pos[c] = real ? row->pos[t] : 0;
                b->block_pos[c] = real ? row->block_pos[t] : 0;
                b->labels[c] = real ? row->labels[t] : -100;
            }
            b->sep[r] = row->sep;
            b->cloze_at[r] = row->sep; /* cloze rows: the [sop] after the context */
            for (int c = 0; c < R->n_classes; c++) b->cand[r * R->n_classes + c] = R->verbalizer[c];
        }
    }
}
