// Where the CLI keeps conversations: --db FILE | sqlite://FILE | postgresql://..., defaulting to
// $XDG_DATA_HOME/parley/parley.db (else ~/.local/share/parley/parley.db).
#pragma once

#include <memory>
#include <string>

#include "parley/store.hpp"

namespace parley::cli {

std::string defaultDbPath();

// Opens `url` (the default database when empty), creating the default file's folder first.
std::shared_ptr<ConversationStore> openCliStore(const std::string& url);

// The id of the thread with the latest turn, for -c; "" when the store holds none.
std::string mostRecentThread(ConversationStore& store);

// A thread's title from its first prompt: the first line, cut at a word boundary near 60
// characters (never inside a UTF-8 character).
std::string titleFromPrompt(const std::string& prompt);

// Opens `url` (the default database when empty) read-only, for the commands that only read
// (history list, show, export): they work on a file this user may not write, and create or
// migrate nothing. nullptr when `url` names a SQLite file that does not exist (nothing stored).
std::shared_ptr<ConversationStore> openCliStoreForReading(const std::string& url);

}  // namespace parley::cli
