#pragma once

#include <string>

#include "attnscope/analysis/RunAnalysis.h"
#include "attnscope/core/JsonText.h"

namespace attnscope {
namespace analysis {

// The analysis as JSON, schema "attnscope.analysis/1" (docs/ANALYSIS.md).
class JsonReport {
 public:
  static std::string render(const Analysis& analysis);
};

// Shared by the report writers: JSON string and number output, HTML escaping, file writing.
namespace text {
using attnscope::jsonString;  // core/JsonText.h: the summary's escaper too
std::string jsonNumber(double v, const char* format = "%.9g");  // null when not finite
std::string html(const std::string& s);
std::string seconds(double s);  // "12.3 ms", "1.20 s", "850 us"
std::string bytes(double b);    // "17.0 MiB"
// A rate or amount with an SI prefix and `unit`, 3 significant digits: si(1.25e11, "FLOP/s") is
// "125 GFLOP/s"; "-" when not finite.
std::string si(double v, const char* unit);
std::string percent(double fraction);  // "41%", "0.5%"; "-" when not finite
// Writes atomically (temporary file, then rename); false and `error` on failure.
bool writeFile(const std::string& path, const std::string& content, std::string* error);
}  // namespace text

}  // namespace analysis
}  // namespace attnscope
