/* Sampler + collator as an rt_train_data (see data_loader.h). */
#include "data/data_loader.h"

#include "data/data_collate.h"

struct data_loader {
    const data_tokenized *ds;
    const data_tokenized *tgt; /* seq2seq targets, NULL for classification */
    data_sampler *sampler;
    int batch_size;
    int32_t pad_id;
    data_pad pad;
    int32_t *indices;
};

rt_status data_loader_init(const data_tokenized *ds, const data_sampler_opts *opts, int batch_size, int32_t pad_id,
                           const data_pad *pad, data_loader **out) {
    rt_status st = RT_OK;
    data_loader *l = rt_xcalloc(1, sizeof *l);
    l->ds = ds;
    l->batch_size = batch_size;
    l->pad_id = pad_id;
    l->pad = *pad;
    l->indices = rt_xmalloc(((size_t)batch_size + 1) * sizeof(int32_t));
    RT_TRY(data_sampler_init(ds->n, opts, &l->sampler));
    *out = l;
    return RT_OK;
fail:
    data_loader_free(l);
    return st;
}

rt_status data_loader_init_seq2seq(const data_tokenized *src, const data_tokenized *tgt, const data_sampler_opts *opts,
                                   int batch_size, int32_t pad_id, const data_pad *pad, data_loader **out) {
    if (src->n != tgt->n) return rt_errorf(RT_ERR_CONFIG, "seq2seq data: %zu sources but %zu targets", src->n, tgt->n);
    rt_status st = data_loader_init(src, opts, batch_size, pad_id, pad, out);
    if (st == RT_OK) (*out)->tgt = tgt;
    return st;
}

void data_loader_free(data_loader *l) {
    if (!l) return;
    data_sampler_free(l->sampler);
    free(l->indices);
    free(l);
}

static rt_status data_loader_next(void *ctx, rt_batch *into, bool *end) {
    data_loader *l = ctx;
    int count = 0;
    *end = false;
    if (!data_sampler_next_batch(l->sampler, l->batch_size, l->indices, &count)) {
        *end = true;
        return RT_OK;
    }
    if (l->tgt) return data_collate_seq2seq(l->ds, l->tgt, l->indices, count, l->pad_id, &l->pad, into);
    return data_collate_classification(l->ds, l->indices, count, l->pad_id, &l->pad, into);
}

static void data_loader_get_state(void *ctx, int64_t *epoch, int64_t *position) {
    data_loader *l = ctx;
    data_sampler_state s = data_sampler_get_state(l->sampler);
    *epoch = (int64_t)s.epoch;
    *position = (int64_t)s.position;
}

static rt_status data_loader_set_state(void *ctx, int64_t epoch, int64_t position) {
    data_loader *l = ctx;
    data_sampler_state s = data_sampler_get_state(l->sampler);
    s.epoch = (uint64_t)epoch;
    s.position = (uint64_t)position;
    return data_sampler_set_state(l->sampler, &s);
}

rt_train_data data_loader_train_data(data_loader *l) {
    rt_train_data d = {
        .ctx = l,
        .batches_per_epoch = (int64_t)data_sampler_batches_per_epoch(l->sampler, l->batch_size),
        .next = data_loader_next,
        .get_state = data_loader_get_state,
        .set_state = data_loader_set_state,
        .batch_free = data_batch_free,
    };
    return d;
}
