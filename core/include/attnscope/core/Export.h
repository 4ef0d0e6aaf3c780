#pragma once

// Symbols marked ATTNSCOPE_API are exported from libattnscope; everything else is hidden
// (the library is built with -fvisibility=hidden because it is loaded into someone else's process).
#if defined(_WIN32)
#define ATTNSCOPE_API
#else
#define ATTNSCOPE_API __attribute__((visibility("default")))
#endif
