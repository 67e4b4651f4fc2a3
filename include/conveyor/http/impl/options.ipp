// conveyor/http/impl/options.ipp — naming a time limit for messages.
#ifndef CONVEYOR_HTTP_IMPL_OPTIONS_IPP
#define CONVEYOR_HTTP_IMPL_OPTIONS_IPP

#include <conveyor/http/options.hpp>

#include <conveyor/http/error.hpp>

#include <cstdio>

namespace conveyor::http {

CONVEYOR_DECL std::string timeout_name(std::error_code ec, const timeouts& t)
{
    if (ec.category() != http_category()) return {};
    const char* name = nullptr;
    std::chrono::milliseconds d{};
    switch (static_cast<errc>(ec.value())) {
    case errc::connect_timeout: name = "connect timeout", d = t.connect; break;
    case errc::first_byte_timeout: name = "first byte timeout", d = t.first_byte; break;
    case errc::idle_timeout: name = "idle timeout", d = t.idle; break;
    case errc::total_timeout: name = "total timeout", d = t.total; break;
    case errc::attempt_timeout: name = "attempt timeout", d = t.attempt; break;
    default: return {};
    }
    // A total deadline set by the caller alone (request::deadline) has no value here.
    if (d.count() <= 0) return name;
    char value[32];
    const auto ms = static_cast<long long>(d.count());
    if (ms % 1000 == 0) std::snprintf(value, sizeof value, "%lld s", ms / 1000);
    else if (ms < 10'000) std::snprintf(value, sizeof value, "%lld ms", ms);
    else std::snprintf(value, sizeof value, "%.1f s", static_cast<double>(ms) / 1000);
    return std::string(name) + " (" + value + ")";
}

} // namespace conveyor::http

#endif
