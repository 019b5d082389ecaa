// The SQL expression of a message's words on PostgreSQL, as macros of string literals because
// the schema's index (schema.cpp) and the search query (sql_store.cpp) must spell it exactly
// alike for the planner to use the index. Internal to src/store/; include it in .cpp files only.
#pragma once

// PostgreSQL: an expression index of the text's words ('simple': no language's stemming), with
// the accents of Latin letters folded as SQLite's remove_diacritics folds them (translate() is
// immutable, as an index needs; unaccent() is neither immutable nor always installed). The text
// comes from a function that reads a body that is not JSON, or that jsonb refuses (a \u0000), as
// no text: such a row must not make its insert fail.
#define PARLEY_FOLD(x)                                                                                               \
  "translate(" x                                                                                                     \
  ", 'ÁÀÂÄÃÅáàâäãåÉÈÊËéèêëÍÌÎÏíìîïÓÒÔÖÕóòôöõÚÙÛÜúùûüÇçÑñÝýÿ', " \
  "'AAAAAAaaaaaaEEEEeeeeIIIIiiiiOOOOOoooooUUUUuuuuCcNnYyy')"
#define PARLEY_MESSAGE_WORDS \
  "to_tsvector('simple', " PARLEY_FOLD("COALESCE(parley_message_text(body), '')") ")"
