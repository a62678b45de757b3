// kolo-predict's Python helpers (python/kolo/predict/from_model.py and
// plot.py), run with a Python that has torch or matplotlib.
//
// Contract
// - helperPath(file) finds the helper: next to the tool in a build tree
//   (<bin>/../python/kolo/predict/<file>), else in the source tree the tool
//   was built from; throws std::runtime_error naming both places when neither has it.
// - runHelper runs `python helper args...` and returns its standard output;
//   a failure (exit status not 0) throws std::runtime_error with the
//   helper's standard error, which names what is wrong.
// - readModelScript runs from_model.py on a script and returns its tensors
//   in backward order.
#pragma once

#include <string>
#include <vector>

#include "predict/train_spec.h"

namespace kolo::predict::cli {

std::string helperPath(const std::string& file);

std::string runHelper(const std::string& python, const std::string& helper,
                      const std::vector<std::string>& args);

std::vector<LayerGrad> readModelScript(const std::string& python,
                                       const std::string& script);

}  // namespace kolo::predict::cli
