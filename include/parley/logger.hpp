// Where a host's diagnostics go: one function type for every host's `log` option and one
// fallback (leveldb's info_log idea). A line is one diagnostic without its trailing newline.
//
// Thread-safety: writeLog() may be called from any thread; a Logger given to parley must be safe
// to call from several threads at once (the executor, the worker and the service call it from
// their pools).
#pragma once

#include <functional>
#include <string>

namespace parley {

using Logger = std::function<void(const std::string& line)>;

// Hands `line` to `log`, or, when it is null, writes it to stderr with a newline (one write, so
// lines of several threads do not interleave). A logger that throws is not called again for this
// line: the line goes to stderr instead.
void writeLog(const Logger& log, const std::string& line) noexcept;

}  // namespace parley
