// The `.fusion` text front end (docs: FUSION_FORMAT.md): a hand-written lexer and recursive-descent
// parser that builds Fusions through Fusion::add_input/add_op/add_output. Every mistake is a
// UserError "file:line:col: message" saying what was expected and what was found; no byte string
// makes it crash or hang.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "alloy/ir/fusion.h"

namespace alloy {

// Every fusion in `text`, in file order. `file_name` is used in error locations and Op::loc.
std::vector<std::unique_ptr<Fusion>> parse_fusions(std::string_view text, const std::string& file_name);

// Every error in `text` (for `alloy check`): after an error in a statement the parser goes on at
// the next line, and uses of the names that statement failed to define are not reported again.
// An error outside statements (a parameter, a header) ends the file. Empty when all is well.
std::vector<std::string> check_fusions(std::string_view text, const std::string& file_name);

// The fusion called `name`, or the first one in the file when no name is given.
std::unique_ptr<Fusion> parse_fusion(std::string_view text, const std::string& file_name,
                                     std::optional<std::string> name = std::nullopt);

// Reads `path` and parses it like parse_fusion; a file that cannot be read is a user error.
std::unique_ptr<Fusion> parse_fusion_file(const std::string& path, std::optional<std::string> name = std::nullopt);

// Whether `name` can name a value (or fusion) in the text format: an identifier that is not a
// word the parser reads as something else (true, false, inf, nan, return).
bool is_value_name(std::string_view name);

// Whether `name` can be a size symbol in the text format: a value name that is not a dtype name.
bool is_symbol_name(std::string_view name);

}  // namespace alloy
