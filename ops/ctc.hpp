/// \file
/// K:: connectionist temporal classification (Keras 2.2.4/2.3.1 on TF): ctc_label_dense_to_sparse,
/// ctc_batch_cost and ctc_decode. The blank is the last class.
#pragma once

#include <vector>

#include "engine/tensor.hpp"

namespace ktape::backend {

/// The labels labels[b, :label_lengths[b]] as a sparse tensor of labels' shape and dtype
/// (ops/sparse.hpp). labels: (samples, max_label_length); label_lengths: (samples,) integers, a
/// length above max_label_length taking the whole row and one below 0 none (as Keras's mask).
/// A Function's shapes are fixed when it compiles, so the positions past each length stay as
/// padding entries, which every sparse op skips (TF's sparse tensor leaves them out): to_dense
/// and dot give Keras's values, whatever the labels hold there.
Tensor ctc_label_dense_to_sparse(const Tensor& labels, const Tensor& label_lengths);

/// The CTC loss of each sample, (samples, 1). y_true: (samples, max_label_length) class ids
/// (float ids are truncated, as TF's to_int32); y_pred: (samples, time_steps, classes)
/// probabilities; input_length and label_length: (samples, 1) or (samples,) integers. As Keras:
/// log(y_pred + epsilon()) are the logits of TF's ctc_loss, which applies log_softmax over the
/// classes. Differentiable with respect to y_pred. ValueError when the Function runs for a label
/// outside [0, classes - 1), lengths outside their tensors, or too few steps for a sample's labels
/// (each repeated label needs a blank between: TF's "Not enough time for target transition
/// sequence").
Tensor ctc_batch_cost(const Tensor& y_true, const Tensor& y_pred, const Tensor& input_length,
                      const Tensor& label_length);

struct CtcDecodeOptions {
  bool greedy = true;
  int beam_width = 100;
  int top_paths = 1;
  bool merge_repeated = false;  ///< beam search: merge repeated labels of the result (2.3.1)
};
struct CtcDecoded {
  std::vector<Tensor> decoded;  ///< top_paths int64 (samples, time_steps) tensors, -1 padded
  Tensor log_probability;       ///< (samples, top_paths) (greedy: (samples, 1))
};
/// Keras's ctc_decode on log(y_pred + epsilon()). Greedy: the best class per step, repeats
/// merged, blanks removed; log_probability is TF's: minus the sum of the best logits. Beam
/// search: CTC prefix beam search over log_softmax of the logits (TF), `beam_width` beams, the
/// `top_paths` best with their log probabilities (-inf and an all -1 row past the distinct
/// paths found). Keras trims the decoded matrix to its longest path; ktape's shapes are fixed
/// when a Function compiles, so it has time_steps columns and the extra ones are -1.
/// input_length: (samples,) or (samples, 1) integers. ValueError for top_paths > beam_width or
/// values < 1; an input_length outside [0, time_steps] when the Function runs.
CtcDecoded ctc_decode(const Tensor& y_pred, const Tensor& input_length,
                      const CtcDecodeOptions& options = {});

}  // namespace ktape::backend
