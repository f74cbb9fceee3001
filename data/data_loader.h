/* A training iterator over a tokenized dataset (classification, or seq2seq source/target pairs): the seeded sampler plus the dynamic-padding
 * collator, exposed as the rt_train_data the shared training loop consumes. */
#ifndef DATA_LOADER_H
#define DATA_LOADER_H

#include "data/data_dataset.h"
#include "data/data_pad.h"
#include "data/data_sampler.h"
#include "runtime/train/rt_trainer.h"

typedef struct data_loader data_loader;

/* pad (data_pad.h) is copied. */
rt_status data_loader_init(const data_tokenized *ds, const data_sampler_opts *opts, int batch_size, int32_t pad_id,
                           const data_pad *pad, data_loader **out);
/* The same over a seq2seq dataset: rows of src and tgt pair up (data_collate_seq2seq). */
rt_status data_loader_init_seq2seq(const data_tokenized *src, const data_tokenized *tgt, const data_sampler_opts *opts,
                                   int batch_size, int32_t pad_id, const data_pad *pad, data_loader **out);
void data_loader_free(data_loader *l);
/* The callbacks for rt_train; valid while l lives. */
rt_train_data data_loader_train_data(data_loader *l);

#endif
