// conveyor/store/file.hpp — the store of local paths, over the file module.
#ifndef CONVEYOR_STORE_FILE_HPP
#define CONVEYOR_STORE_FILE_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/store/store.hpp>

namespace conveyor::store {

/** Local files: reads through the runtime's io_uring rings (`file::ranged_file`,
    `file::read_chunks`), listings of a folder by walking it, writes to a hidden temporary
    file in the object's folder (`.<name>.tmp-<pid>-<n>`, missing folders made) renamed to
    its name on commit, so a reader never sees a partial object. */
class file_store final : public store {
public:
    /// A store reading through `rt`'s rings; null: `runtime::shared()`, made at the first
    /// read that needs it (`read`, `list` and writes need none).
    explicit file_store(runtime* rt = nullptr) noexcept : rt_(rt) {}

    CONVEYOR_DECL runtime& rt() const override;
    bool remote() const noexcept override { return false; }
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<slice> async_read(location where, std::int64_t size_hint = -1) const override;
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<std::shared_ptr<const ranged_object>> async_open(location where) const override;
    /// Reads the file with plain blocking reads on the calling thread (no runtime needed).
    CONVEYOR_DECL slice read(const location& where) const override;
    CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(const location& where, const chunk_options& o) const override;
    /// Regular files under the folder `where` (all levels down; symbolic links followed to
    /// files, not into folders), sorted by path.
    CONVEYOR_DECL std::vector<listed_object> list(const location& where) const override;
    CONVEYOR_DECL std::unique_ptr<object_writer> open_writer(const location& where, const write_options& o) const override;

private:
    runtime* rt_;
};

} // namespace conveyor::store

#if CONVEYOR_HEADER_ONLY
#include <conveyor/store/impl/file.ipp>
#endif

#endif
