// conveyor/image/impl/error.ipp — the image module's error category (see error.hpp).
#ifndef CONVEYOR_IMAGE_IMPL_ERROR_IPP
#define CONVEYOR_IMAGE_IMPL_ERROR_IPP

#include <conveyor/image/error.hpp>

#include <utility>

namespace conveyor::image {

namespace detail {
class image_category_impl final : public std::error_category {
public:
    const char* name() const noexcept override { return "conveyor.image"; }
    std::string message(int ev) const override
    {
        switch (static_cast<errc>(ev)) {
        case errc::not_an_image: return "not a JPEG, PNG, WebP or AVIF image";
        case errc::truncated: return "image data are truncated";
        case errc::corrupt: return "image data are corrupt";
        case errc::unsupported: return "unsupported kind of image";
        case errc::too_large: return "image is larger than a decoding limit (pixels, metadata or scans)";
        case errc::zero_size: return "image is empty";
        case errc::bad_options: return "invalid image decode options";
        case errc::missing_field: return "sample has no such field or key";
        case errc::bad_label: return "label is not an integer or not in the label map";
        case errc::bad_field: return "field is not what its decoder reads";
        case errc::field_decoder_failed: return "a user's field decoder failed";
        }
        return "unknown conveyor.image error";
    }
};
} // namespace detail

CONVEYOR_DECL const std::error_category& image_category() noexcept
{
    static const detail::image_category_impl cat;
    return cat;
}

CONVEYOR_DECL std::error_code make_error_code(errc e) noexcept
{
    return {static_cast<int>(e), image_category()};
}

namespace detail {

CONVEYOR_DECL conveyor::error image_error(errc code, std::string_view key, std::string_view where, std::string detail)
{
    return conveyor::error(make_error_code(code), {.key = std::string(key),
                                                   .where = conveyor::detail::redact_userinfo(where),
                                                   .detail = std::move(detail)});
}

} // namespace detail

} // namespace conveyor::image

#endif
