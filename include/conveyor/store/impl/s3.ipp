// conveyor/store/impl/s3.ipp — the store of s3:// objects.
#ifndef CONVEYOR_STORE_IMPL_S3_IPP
#define CONVEYOR_STORE_IMPL_S3_IPP

#include <conveyor/core/error.hpp>
#include <conveyor/s3/chunks.hpp>
#include <conveyor/s3/multipart.hpp>
#include <conveyor/store/s3.hpp>

#include <algorithm>
#include <cstring>
#include <optional>
#include <system_error>

namespace conveyor::store {
namespace detail {

/// An S3 object being written: parts uploaded as they fill; one PutObject when it stays
/// under one part.
class s3_writer final : public object_writer {
public:
    s3_writer(const s3::client& c, const location& where, std::string content_type)
        : c_(c), where_(where), content_type_(std::move(content_type))
    {
        if (where_.key().empty() || where_.key().back() == '/')
            throw conveyor::error(std::make_error_code(std::errc::invalid_argument),
                                  {.stage = "store", .where = where.printable(), .detail = "names no object to write (the key is empty or ends in '/')"});
        part_size_ = std::max<std::uint64_t>(c_.options().upload_part_size, 5u << 20);
        part_ = c_.rt().buffers().acquire(static_cast<std::size_t>(part_size_));
        part_.resize(0);
    }
    ~s3_writer() override { abandon(); }

    void write(std::span<const std::byte> bytes) override
    {
        while (!bytes.empty()) {
            const std::size_t room = static_cast<std::size_t>(part_size_) - part_.size();
            const std::size_t n = std::min(room, bytes.size());
            const std::size_t at = part_.size();
            part_.resize(at + n);
            if (n) std::memcpy(part_.data() + at, bytes.data(), n);
            bytes = bytes.subspan(n);
            if (part_.size() == part_size_) send_part();
        }
    }

    void commit() override
    {
        if (!upload_) {
            c_.run(c_.async_put(where_, part_.span(), content_type_));
            part_ = buffer{};
            return;
        }
        if (part_.size() > 0) send_part();
        upload_->complete();
        upload_.reset();
    }

    void abandon() noexcept override
    {
        // The upload aborts itself in the background when dropped unfinished.
        upload_.reset();
        part_ = buffer{};
    }

private:
    void send_part()
    {
        if (!upload_) upload_.emplace(c_, where_, content_type_);
        buffer full = std::move(part_);
        part_ = c_.rt().buffers().acquire(static_cast<std::size_t>(part_size_));
        part_.resize(0);
        upload_->upload_part(std::move(full));
    }

    s3::client c_;
    location where_;
    std::string content_type_;
    std::uint64_t part_size_ = 0;
    buffer part_;
    std::optional<s3::multipart_upload> upload_;
};

/// An S3 object named for ranged reads (each one a ranged GET).
class s3_object final : public ranged_object {
public:
    s3_object(s3::client c, location where) : c_(std::move(c)), where_(std::move(where)) {}
    asio::awaitable<slice> async_read(std::uint64_t offset, std::uint64_t length) const override
    {
        co_return slice(co_await c_.async_get_range(where_, offset, length));
    }

private:
    s3::client c_;
    location where_;
};

} // namespace detail

CONVEYOR_DECL asio::awaitable<slice> s3_store::async_read(location where, std::int64_t size_hint) const
{
    co_return slice(co_await c_.async_get(where, size_hint));
}

CONVEYOR_DECL asio::awaitable<std::shared_ptr<const ranged_object>> s3_store::async_open(location where) const
{
    co_return std::make_shared<detail::s3_object>(c_, std::move(where));
}

CONVEYOR_DECL asio::awaitable<object_version> s3_store::async_version(location where) const
{
    const auto info = co_await c_.async_head(where);
    co_return object_version{info.etag, info.size};
}

CONVEYOR_DECL slice s3_store::read(const location& where) const
{
    return slice(c_.run(c_.async_get(where)));
}

CONVEYOR_DECL std::unique_ptr<chunk_reader> s3_store::read_chunks(const location& where, const chunk_options& o) const
{
    return s3::read_chunks(c_, where, o);
}

CONVEYOR_DECL std::vector<listed_object> s3_store::list(const location& where) const
{
    auto objects = c_.run(c_.async_list_all(where));
    std::sort(objects.begin(), objects.end(), [](const s3::object_info& a, const s3::object_info& b) { return a.key < b.key; });
    std::vector<listed_object> out;
    out.reserve(objects.size());
    for (const auto& obj : objects) out.push_back({"s3://" + where.bucket() + "/" + obj.key, obj.size});
    return out;
}

CONVEYOR_DECL std::unique_ptr<object_writer> s3_store::open_writer(const location& where, const write_options& o) const
{
    return std::make_unique<detail::s3_writer>(c_, where, o.content_type);
}

} // namespace conveyor::store

#endif
