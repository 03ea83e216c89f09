// Secrets kept in files: job tokens and the token of `cohort serve`.
//
// A secret file must be readable by its owner only. One that its group or anybody else can read
// (or write) is refused with the command to fix it, before its content is used: a token that
// other local users can read authenticates them too.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace cohort {

// The file's content without trailing whitespace. Throws ConfigError naming `what` (the option
// it came from, "--token-file") and the file when it cannot be read, when its mode lets anybody
// but its owner read or write it, or when the secret is shorter than `min_length` characters.
std::string read_secret_file(const std::filesystem::path& path, const std::string& what,
                             size_t min_length = 16);

// Writes `secret` and a newline to `path` with mode 0600, atomically (write_file_atomically).
void write_secret_file(const std::filesystem::path& path, const std::string& secret);

// 32 random bytes as 64 hex digits.
std::string random_token();

// Compares two secrets in time that does not depend on where they differ.
bool secrets_equal(std::string_view a, std::string_view b);

}  // namespace cohort
