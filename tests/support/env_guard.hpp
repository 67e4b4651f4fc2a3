// tests/support/env_guard.hpp — environment variables set or unset for a test's scope,
// each put back as it was. Not a translation unit.
#ifndef CONVEYOR_TESTS_SUPPORT_ENV_GUARD_HPP
#define CONVEYOR_TESTS_SUPPORT_ENV_GUARD_HPP

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <stdlib.h> // setenv, unsetenv

namespace conveyor_test {

/// Sets and unsets environment variables, and puts back every one it touched.
class env_guard {
public:
    env_guard() = default;
    env_guard(const env_guard&) = delete;
    env_guard& operator=(const env_guard&) = delete;
    ~env_guard()
    {
        for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
            if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1);
            else ::unsetenv(it->first.c_str());
        }
    }
    env_guard& set(const char* name, const std::string& value)
    {
        save(name);
        ::setenv(name, value.c_str(), 1);
        return *this;
    }
    env_guard& unset(const char* name)
    {
        save(name);
        ::unsetenv(name);
        return *this;
    }

private:
    void save(const char* name)
    {
        for (const auto& s : saved_)
            if (s.first == name) return;
        const char* v = std::getenv(name);
        saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
    }
    std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

} // namespace conveyor_test

#endif
