#pragma once

#include <string>

namespace attnscope {

// `s` as a JSON string literal, quotes included: `"`, `\` and control characters escaped. The
// summary JSON and the analysis' reports write every string through it.
std::string jsonString(const std::string& s);

}  // namespace attnscope
