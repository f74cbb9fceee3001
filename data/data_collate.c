/* Dynamic padding into a reusable rt_batch (see data_collate.h). */
#include "data/data_collate.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_glue.h"

/* Room for count rows of width targets in the batch's own buffer: batch->targets points into it
 * only for data with targets, so class-id batches show NULL and the buffer is never lost. */
static rt_status data_batch_reserve_targets(rt_batch *batch, int count, int width) {
    const size_t cells = (size_t)count * (size_t)width;
    if (cells > batch->capacity_targets) {
        float *t = realloc(batch->target_store, cells * sizeof *t);
        if (!t) return rt_errorf(RT_ERR_NOMEM, "batch: out of memory for %d x %d targets", count, width);
        batch->target_store = t;
        batch->capacity_targets = cells;
    }
    batch->targets = batch->target_store;
    batch->target_width = width;
    return RT_OK;
}

rt_status data_batch_reserve(rt_batch *batch, int B, int T) {
    RT_CHECK(B >= 0 && T >= 0, "B=%d T=%d", B, T);
    if (B <= batch->capacity_B && T <= batch->capacity_T) return RT_OK;
    int nb = B > batch->capacity_B ? B : batch->capacity_B;
    int nt = T > batch->capacity_T ? T : batch->capacity_T;
    size_t cells = (size_t)nb * (size_t)nt;
    size_t rows = (size_t)(nb ? nb : 1);
    /* Contents are rewritten by the next collate, so realloc's copy is wasted but harmless. */
    int32_t *ids = realloc(batch->input_ids, (cells ? cells : 1) * sizeof *ids);
    if (ids) batch->input_ids = ids;
    int32_t *mask = realloc(batch->attention_mask, (cells ? cells : 1) * sizeof *mask);
    if (mask) batch->attention_mask = mask;
    int32_t *types = realloc(batch->token_type_ids, (cells ? cells : 1) * sizeof *types);
    if (types) batch->token_type_ids = types;
    int32_t *lengths = realloc(batch->lengths, rows * sizeof *lengths);
    if (lengths) batch->lengths = lengths;
    int32_t *labels = realloc(batch->labels, rows * sizeof *labels);
    if (labels) batch->labels = labels;
    int32_t *index = realloc(batch->example_index, rows * sizeof *index);
    if (index) batch->example_index = index;
    if (!ids || !mask || !types || !lengths || !labels || !index)
        return rt_errorf(RT_ERR_NOMEM, "batch: out of memory for %d x %d tokens", nb, nt);
    /* Capacities grow only once every buffer has the new size. */
    batch->capacity_B = nb;
    batch->capacity_T = nt;
    return RT_OK;
}

rt_status data_collate_classification(const data_tokenized *ds, const int32_t *indices, int count, int32_t pad_id,
                                      const data_pad *pad, rt_batch *batch) {
    rt_status st = RT_OK;
    RT_CHECK(count >= 0, "count=%d", count);
    RT_CHECK(pad->multiple >= 1, "pad multiple %d", pad->multiple);
    RT_CHECK(pad_id >= 0, "pad_id=%d (pass the eos id for tokenizers without a pad token)", pad_id);
    int longest = 0;
    for (int b = 0; b < count; b++) {
        int32_t i = indices[b];
        RT_CHECK(i >= 0 && (size_t)i < ds->n, "index %d of a dataset of %zu", i, ds->n);
        if (ds->lengths[i] > longest) longest = ds->lengths[i];
    }
    batch->B = count;
    batch->targets = NULL;
    batch->target_width = 0;
    batch->n_targets = 0;
    batch->n_tokens = 0;
    if (count == 0) {
        batch->T = 0;
        return RT_OK;
    }
    const int T = data_pad_length(pad, longest);
    RT_TRY(data_batch_reserve(batch, count, T));
    batch->T = T;
    const int W = ds->targets ? ds->target_width : 0;
    if (ds->targets) RT_TRY(data_batch_reserve_targets(batch, count, W));
    for (int b = 0; b < count; b++) {
        int32_t i = indices[b];
        int len = ds->lengths[i];
        int len_a = ds->len_a[i];
        int32_t *row = batch->input_ids + (size_t)b * T;
        int32_t *mask = batch->attention_mask + (size_t)b * T;
        int32_t *types = batch->token_type_ids + (size_t)b * T;
        memcpy(row, ds->ids + ds->offsets[i], (size_t)len * sizeof *row);
        for (int t = len; t < T; t++) row[t] = pad_id;
        for (int t = 0; t < T; t++) mask[t] = t < len;
        /* BERT segments: 0 over text A and its specials, 1 after it, 0 on padding (HF pads
         * token_type_ids with 0); all 0 for tokenizers without segments (RoBERTa). */
        for (int t = 0; t < T; t++) types[t] = ds->segments && t >= len_a && t < len;
        batch->lengths[b] = len;
        batch->labels[b] = ds->labels[i];
        batch->example_index[b] = i;
        if (ds->targets) {
            memcpy(batch->targets + (size_t)b * W, ds->targets + (size_t)i * W, (size_t)W * sizeof(float));
            batch->n_targets += !isnan(ds->targets[(size_t)i * W]);
        } else {
            batch->n_targets += ds->labels[i] != DATA_LABEL_NONE;
        }
        batch->n_tokens += (size_t)len;
    }
fail:
    return st;
}

rt_status data_collate_seq2seq(const data_tokenized *src, const data_tokenized *tgt, const int32_t *indices, int count,
                               int32_t pad_id, const data_pad *pad, rt_batch *batch) {
    rt_status st = RT_OK;
    RT_CHECK(src->n == tgt->n, "seq2seq: %zu sources but %zu targets", src->n, tgt->n);
    RT_TRY(data_collate_classification(src, indices, count, pad_id, pad, batch));
    batch->n_targets = 0;
    batch->T_dec = 0;
    if (count == 0) return RT_OK;
    int longest = 1;
    for (int b = 0; b < count; b++)
        if (tgt->lengths[indices[b]] > longest) longest = tgt->lengths[indices[b]];
    const int T = data_pad_length(pad, longest);
    size_t cells = (size_t)count * (size_t)T;
    if (cells > (size_t)batch->capacity_dec) {
        int32_t *grown = realloc(batch->dec_labels, cells * sizeof *grown);
        if (!grown) return rt_errorf(RT_ERR_NOMEM, "batch: out of memory for %d x %d target tokens", count, T);
        batch->dec_labels = grown;
        batch->capacity_dec = (int)cells;
    }
    batch->T_dec = T;
    for (int b = 0; b < count; b++) {
        int32_t i = indices[b];
        int len = tgt->lengths[i];
        int32_t *row = batch->dec_labels + (size_t)b * T;
        memcpy(row, tgt->ids + tgt->offsets[i], (size_t)len * sizeof *row);
        for (int t = len; t < T; t++) row[t] = -100;
        batch->n_targets += len;
        batch->n_tokens += (size_t)len;
    }
fail:
    return st;
}

void data_batch_free(rt_batch *batch) {
    if (!batch) return;
    free(batch->dec_labels);
    free(batch->input_ids);
    free(batch->attention_mask);
    free(batch->lengths);
    free(batch->labels);
    free(batch->target_store);
    free(batch->example_index);
    free(batch->token_type_ids);
    memset(batch, 0, sizeof *batch);
}
