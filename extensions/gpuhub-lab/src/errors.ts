/** Errors of the server extension's API, and the XSRF token (pure). */

export class ApiError extends Error {
  constructor(
    readonly status: number,
    /** The refusal as the server wrote it, without the field's name before it. */
    readonly reason: string,
    readonly field?: string
  ) {
    super(field && !reason.startsWith(field) ? `${field}: ${reason}` : reason);
  }
}

/** The `_xsrf` cookie's value (what ServerConnection sends as X-XSRFToken). */
export function xsrfToken(cookies: string): string {
  const match = cookies.match('\\b_xsrf=([^;]*)\\b');
  return match ? decodeURIComponent(match[1]) : '';
}

/** The error of a failed answer: the service's {error, field} when there is one. */
export function errorFrom(status: number, body: string): ApiError {
  try {
    const data = JSON.parse(body);
    if (data && typeof data.error === 'string') {
      return new ApiError(status, data.error, data.field ?? undefined);
    }
    if (data && typeof data.message === 'string') {
      return new ApiError(status, data.message);
    }
  } catch {
    // not JSON: described below
  }
  return new ApiError(status, `HTTP ${status}${body ? `: ${body.slice(0, 200)}` : ''}`);
}
