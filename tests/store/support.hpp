// Helpers shared by the store tests: a slice as text, an awaitable run to its end on a
// runtime's first I/O lane, and a shard list's samples as comparable text.
#ifndef CONVEYOR_TESTS_STORE_SUPPORT_HPP
#define CONVEYOR_TESTS_STORE_SUPPORT_HPP

#include <conveyor/core/runtime.hpp>
#include <conveyor/core/slice.hpp>
#include <conveyor/shard/source.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <string>
#include <utility>
#include <vector>

namespace store_test {

inline std::string text_of(const conveyor::slice& s) { return std::string(reinterpret_cast<const char*>(s.data()), s.size()); }

/// Runs `a` on `rt`'s first I/O lane and waits for its result.
template <class T>
T run_on(conveyor::runtime& rt, boost::asio::awaitable<T> a)
{
    return boost::asio::co_spawn(rt.io_executor(0), std::move(a), boost::asio::use_future).get();
}

/// Samples as comparable text: key and offset, then each field's name and bytes.
inline std::vector<std::string> samples_of(const std::vector<conveyor::shard::shard_ref>& list, const conveyor::shard::source_options& o)
{
    std::vector<std::string> out;
    for (auto& s : conveyor::shard::shards(list, o)) {
        std::string t = s.key + " @" + std::to_string(s.offset);
        for (const auto& f : s.fields) t += " " + f.name + "=" + text_of(f.data);
        out.push_back(std::move(t));
    }
    return out;
}

} // namespace store_test

#endif
