// Training curves as a self-contained SVG image (no scripts, fonts or external files): a title
// and two panels, loss and accuracy per epoch, each with the training curve (solid blue) and the
// validation curve (dashed orange), axes with tick labels, and a legend. One <polyline> per
// curve that has any finite value, with one point per finite value (NaN/inf are skipped);
// curves of up to 60 points also get a dot per point, so a single epoch is visible.
// Accuracy is read from "acc"/"val_acc", or "accuracy"/"val_accuracy" if those are absent.
#pragma once

#include <string>

#include "train/history.hpp"

namespace ktape::train {

std::string history_svg(const History& history, const std::string& title = "Training history");
// Writes history_svg() to `path` atomically; throws IOError on failure.
void write_history_svg(const History& history, const std::string& path,
                       const std::string& title = "Training history");

}  // namespace ktape::train
